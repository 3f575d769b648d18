"""``peercrawl stats``: the largest unique-IP counters (SPEC §7).

Each query reads one sorted-set index (``crawler.counters.names``), so it
answers in milliseconds on a Redis holding millions of counters.
"""

from __future__ import annotations

import csv
import io
import json

import click

from crawler.cli.context import open_context
from crawler.counters import top
from crawler.counters.names import FAMILIES


@click.command("stats")
@click.argument("family", type=click.Choice(FAMILIES))
@click.option("--torrent", metavar="HASH", help="Only this torrent's counters (40-hex info-hash).")
@click.option("--country", metavar="NAME", help="Only this country (its English name, e.g. 'Germany').")
@click.option("--month", metavar="YYYY-MM", help="The month counters (UTC) instead of the lifetime ones.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {metric, count} (--format json).")
@click.option("--format", "fmt", type=click.Choice(("table", "json", "csv")), default=None,
              help="table (default), json, or csv (header metric,count) for spreadsheets.")
def command(family: str, torrent: str | None, country: str | None, month: str | None, limit: int,
            as_json: bool, fmt: str | None) -> None:
    """Show the largest unique-IP counters of FAMILY, largest first.

    FAMILY is countries, cities, postcodes or torrents. Without --month the
    lifetime counters; names follow docs/metrics.md ('.' inside a name is
    written %2E).
    """
    if as_json and fmt not in (None, "json"):
        raise click.BadParameter(f"--json contradicts --format {fmt}", param_hint="--format")
    fmt = "json" if as_json else (fmt or "table")
    ctx = open_context()
    try:
        rows = top(ctx.client, ctx.keys, family, torrent=torrent, country=country, month=month, limit=limit)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if fmt == "json":
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(("metric", "count"))
        w.writerows((r["metric"], r["count"]) for r in rows)
        click.echo(buf.getvalue(), nl=False)
        return
    if not rows:
        click.echo("no counters yet")
        return
    width = max(len(str(r["count"])) for r in rows)
    for r in rows:
        click.echo(f"{r['count']:>{width}}  {r['metric']}")
