"""``peercrawl export``: every counter, lifetime and months, as CSV (contract §7)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from crawler.cli.context import open_context
from crawler.safe_text import terminal


@click.command("export")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("peercrawl-export"),
              show_default=True, help="Directory for the CSV files (created if missing; files overwritten).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows written per file as JSON.")
def command(out: Path, as_json: bool) -> None:
    """Write every unique-IP counter, lifetime and months, as CSV files for spreadsheets.

    One file per family (countries, cities, postcodes, torrents and each
    torrent's countries, cities, postcodes); columns: metric (as stats
    prints it), period (all or YYYY-MM), the name's parts (torrents: the
    info-hash and the torrent's name), count. A cell a spreadsheet would take
    for a formula starts with '.
    """
    from crawler.counters.csv_export import export
    from crawler.torrents import torrent_names

    ctx = open_context()
    try:
        counts = export(ctx.client, ctx.keys, out, names=lambda hs: torrent_names.read(ctx.client, ctx.keys, hs))
    except OSError as e:
        raise click.ClickException(f"cannot write {out}: {e.strerror or e}") from None
    if as_json:
        click.echo(json.dumps({"out": str(out), "rows": counts}, indent=2))
        return
    click.echo(f"{'rows':>10}  file")
    for name, n in counts.items():
        click.echo(terminal(f"{n:>10,}  {out / (name + '.csv')}"))
