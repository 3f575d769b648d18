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

``stats torrents`` also shows each torrent's name (``crawler.torrents.torrent_names``:
cleaned when added, one pipelined read for the rows shown): a ``name`` in
each JSON row (null when none), a last column in the table and the CSV,
shown as the metric names are. Its JSON rows also carry the torrent's
coverage (``crawler.queue.coverage``: ``reported_last_visit``,
``counted_last_visit``, ``counted_30_days``, ``coverage``,
``counts_estimated``), a second pipelined read.

Place names print as GeoIP spells them: the table shows each metric with
its names unescaped (``St. Louis``, where the stat name has ``St%2E
Louis``); ``--json`` rows keep ``metric`` exact and add the names unescaped
(``country``, ``city``, ``postcode``: ``crawler.counters.names.read_metric``,
the columns ``export`` writes), and so do the CSV's columns. Where a count
says how many peers no place of the list holds (``rankings.unplaced``), they
follow as one more row: ``unplaced`` in the table, ``{"metric": null,
"count", "unplaced": true}`` in JSON, an empty metric and ``unplaced`` for
the name in the CSV; none when there are none.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import time

import click

from crawler.cli.context import open_context
from crawler.counters import top
from crawler.counters.names import FAMILIES, PLACE_COLUMN, PLACE_KEYS, UNPLACED, read_metric, readable
from crawler.counters.rankings import resolve_country, unplaced
from crawler.queue import coverage
from crawler.safe_text import csv_row, terminal
from crawler.torrents import torrent_names

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
@click.option("--country", metavar="NAME",
              help="Only this country: its English name in any case, or its ISO code ('Germany', 'germany', 'DE').")
@click.option("--month", metavar="YYYY-MM", help="The month counters (UTC) instead of the lifetime ones.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many rows.")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list of {metric, count} and the names in it (torrents: and name) (--format json).")
@click.option("--format", "fmt", type=click.Choice(("table", "json", "csv")), default=None,
              help="table (default), json, or csv (metric, count, the names) for spreadsheets.")
def command(family: str, torrent: str | None, country: str | None, month: str | None, limit: int,
            as_json: bool, fmt: str | None) -> None:
    """Show the largest unique-IP counters of FAMILY, largest first.

    FAMILY is countries, cities, postcodes or torrents (torrents with the
    name add stored, '-' when none). Without --month the lifetime counters.
    Names print as GeoIP spells them (St. Louis); the metric in --json and
    the CSV is the exact stat name, where '.' inside a name is written %2E
    (docs/metrics.md). Peers no place of the list holds (GeoIP could not
    place them) follow as an 'unplaced' row wherever countries, cities or
    postcodes are listed.
    """
    if as_json and fmt not in (None, "json"):
        raise click.BadParameter(f"--json contradicts --format {fmt}", param_hint="--format")
    fmt = "json" if as_json else (fmt or "table")
    ctx = open_context()
    try:
        if country is not None:
            country = resolve_country(ctx.client, ctx.keys, country)
        rows = top(ctx.client, ctx.keys, family, torrent=torrent, country=country, month=month, limit=limit)
        rest = unplaced(ctx.client, ctx.keys, family, torrent=torrent, country=country, month=month, settled=True)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    named = family == "torrents"
    if named:  # torrents.<info-hash>.users[.<month>]
        hashes = [r["metric"].split(".")[1] for r in rows]
        for r, name in zip(rows, torrent_names.read(ctx.client, ctx.keys, hashes)):
            r["name"] = name
    for r in rows:  # the names in the metric, unescaped (St. Louis)
        r.update((k, v) for k, v in read_metric(r["metric"]).items() if k in PLACE_KEYS)
    if rest:
        rows.append({"metric": None, "count": rest, "unplaced": True,
                     **({"country": country} if country is not None and family != "countries" else {})})
    if fmt == "json":
        if named:  # and how much of its swarm the torrent's last visit counted (docs/metrics.md, "Coverage")
            for r, cov in zip(rows, coverage.read(ctx.client, ctx.keys, hashes, time.time())):
                r.update(cov)
        click.echo(json_text(rows))
        return
    if fmt == "csv":
        click.echo(_csv(rows, named, _place_columns(family)), nl=False)
        return
    _table(rows, family, named)


def _table(rows: list[dict], family: str, named: bool) -> None:
    """``rows`` for a terminal: count, the metric with its names unescaped (torrents: and name)."""
    if not rows:
        click.echo("no counters yet")
        return
    width = max(len(str(r["count"])) for r in rows)
    for r in rows:
        if r.get("unplaced"):
            what = PLACE_COLUMN.get(family, "country")
            click.echo(terminal(f"{r['count']:>{width}}  {UNPLACED} (no {what} known)"))
            continue
        name = f"  {r['name'] or '-'}" if named else ""
        click.echo(terminal(f"{r['count']:>{width}}  {readable(r['metric'])}{name}"))


def _csv(rows: list[dict], named: bool, places: list[str]) -> str:
    """``rows`` as CSV: metric, count, the torrent's name (``named``), the names in the metric (``places``).

    The unplaced row has an empty metric and ``unplaced`` for the last name.
    On a terminal the cells are cleaned as the table's are.
    """
    shown = terminal if sys.stdout.isatty() else None
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("metric", "count", *(["name"] if named else []), *places))
    for r in rows:
        names = [r.get(k) or (UNPLACED if r.get("unplaced") and k == places[-1] else "") for k in places]
        cells = [r["metric"] or "", r["count"], *([r["name"] or ""] if named else []), *names]
        w.writerow(csv_row(c if shown is None or not isinstance(c, str) else shown(c) for c in cells))
    return buf.getvalue()


def _place_columns(family: str) -> list[str]:
    """The CSV columns of the names in ``family``'s metrics, as ``export``'s files name them."""
    if family == "countries":
        return ["country"]
    return ["country", PLACE_COLUMN[family]] if family in PLACE_COLUMN else []
