"""``peercrawl stats``: the largest unique-IP counters (contract §7).

Each query reads one sorted-set index (``crawler.counters.names``), so it
answers in milliseconds on a Redis holding millions of counters.

Metric names hold GeoIP's names, a third party's, as stored: what is printed
is made harmless for where it goes. The table is for a terminal: control
characters and bidirectional overrides print as ``?`` (``safe_text.terminal``;
it is printed with click, not rich, so ``[...]`` is never markup). CSV cells a
spreadsheet would take for a formula get a leading ``'`` (``safe_text.csv_row``),
and on a terminal the cells are also cleaned as the table is. JSON keeps the
names exact: it escapes C0 controls itself, and the C1 controls, bidirectional
overrides and line separators it would pass raw are written as ``\\uXXXX``.

``stats torrents`` also shows each torrent's name (``crawler.queue.torrent_names``:
cleaned when added, one pipelined read for the rows shown): a ``name`` in
each JSON row (null when none), a last column in the table and the CSV,
shown as the metric names are. Its JSON rows also carry the torrent's
coverage (``crawler.queue.coverage``: ``reported_last_visit``,
``counted_last_visit``, ``counted_30_days``, ``coverage``,
``counts_estimated``), a second pipelined read.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time

import click

from crawler.cli.context import open_context
from crawler.counters import top
from crawler.counters.names import FAMILIES
from crawler.queue import coverage, torrent_names
from crawler.safe_text import csv_row, terminal

# What json.dumps(ensure_ascii=False) leaves raw that a terminal acts on (C1
# controls, DEL) or that reorders or breaks lines (bidi controls, U+2028/9).
# Outside strings JSON is ASCII, so escaping them anywhere in the text is exact.
_RAW_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def json_text(rows) -> str:
    """``rows`` as indented JSON, names readable (UTF-8) but every control character escaped."""
    text = json.dumps(rows, ensure_ascii=False, indent=2)
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@click.command("stats")
@click.argument("family", type=click.Choice(FAMILIES))
@click.option("--torrent", metavar="HASH", help="Only this torrent's counters (40-hex info-hash).")
@click.option("--country", metavar="NAME", help="Only this country (its English name, e.g. 'Germany').")
@click.option("--month", metavar="YYYY-MM", help="The month counters (UTC) instead of the lifetime ones.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many rows.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {metric, count} (torrents: and name) (--format json).")
@click.option("--format", "fmt", type=click.Choice(("table", "json", "csv")), default=None,
              help="table (default), json, or csv (header metric,count) for spreadsheets.")
def command(family: str, torrent: str | None, country: str | None, month: str | None, limit: int,
            as_json: bool, fmt: str | None) -> None:
    """Show the largest unique-IP counters of FAMILY, largest first.

    FAMILY is countries, cities, postcodes or torrents (torrents with the
    name add stored, '-' when none). Without --month the lifetime counters;
    names follow docs/metrics.md ('.' inside a name is written %2E).
    """
    if as_json and fmt not in (None, "json"):
        raise click.BadParameter(f"--json contradicts --format {fmt}", param_hint="--format")
    fmt = "json" if as_json else (fmt or "table")
    ctx = open_context()
    try:
        rows = top(ctx.client, ctx.keys, family, torrent=torrent, country=country, month=month, limit=limit)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    named = family == "torrents"
    if named:  # torrents.<info-hash>.users[.<month>]
        hashes = [r["metric"].split(".")[1] for r in rows]
        for r, name in zip(rows, torrent_names.read(ctx.client, ctx.keys, hashes)):
            r["name"] = name
    if fmt == "json":
        if named:  # and how much of its swarm the torrent's last visit counted (docs/metrics.md, "Coverage")
            for r, cov in zip(rows, coverage.read(ctx.client, ctx.keys, hashes, time.time())):
                r.update(cov)
        click.echo(json_text(rows))
        return
    if fmt == "csv":
        shown = terminal if click.get_text_stream("stdout").isatty() else None
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(("metric", "count", "name") if named else ("metric", "count"))
        for r in rows:
            cells = [r["metric"], r["count"], *([r["name"] or ""] if named else [])]
            w.writerow(csv_row(c if shown is None or not isinstance(c, str) else shown(c) for c in cells))
        click.echo(buf.getvalue(), nl=False)
        return
    if not rows:
        click.echo("no counters yet")
        return
    width = max(len(str(r["count"])) for r in rows)
    for r in rows:
        name = f"  {r['name'] or '-'}" if named else ""
        click.echo(terminal(f"{r['count']:>{width}}  {r['metric']}{name}"))
