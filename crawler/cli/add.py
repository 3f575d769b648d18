"""``peercrawl add``: admit torrents to the queue (SPEC §1, §7)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click

from crawler.cli.context import open_context
from crawler.errors import ItemError
from crawler.items import parse_item, trackers_of
from crawler.lifecycle import NewItem, Queue


def _sources(items: tuple[str, ...], from_file: TextIO | None) -> Iterator[tuple[str, str, Path | None]]:
    """(where, text, base directory) for every ITEM: arguments, then --from lines."""
    for n, text in enumerate(items, 1):
        yield f"argument {n}", text, None
    if from_file is not None:
        name = getattr(from_file, "name", "-")
        base = None if name in ("-", "<stdin>") else Path(name).parent
        label = "stdin" if base is None else name
        for n, line in enumerate(from_file, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            yield f"{label} line {n}", text, base


@click.command("add")
@click.argument("items", nargs=-1)
@click.option("--from", "from_file", type=click.File("r", encoding="utf-8", errors="replace"),
              help="Read one ITEM per line from FILE, or - for stdin; blank and # lines are skipped.")
@click.option("--tracker", "trackers", multiple=True, metavar="URL",
              help="A tracker to add to every item (repeatable).")
@click.option("--readmit", is_flag=True,
              help="Re-admit evicted torrents (score back to 1.0) and quarantined ones (score kept).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def command(items: tuple[str, ...], from_file: TextIO | None, trackers: tuple[str, ...], readmit: bool,
            as_json: bool) -> None:
    """Add torrents: ITEM is a 40-hex or base32 info-hash, a magnet URI or a .torrent file.

    A torrent already tracked keeps its score and state (its trackers are
    merged). Bad items are reported one per line on stderr; the good ones are
    still added, and the exit code is 1.
    """
    if not items and from_file is None:
        raise click.UsageError("give ITEMs or --from FILE")
    try:
        extra = trackers_of(list(trackers), "--tracker")
    except ItemError as e:
        raise click.BadParameter(str(e).split(": ", 1)[-1], param_hint="--tracker") from None
    ctx = open_context()
    queue = Queue(ctx.client, ctx.keys, ctx.settings)
    counts = {"added": 0, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0,
              "skipped_quarantined": 0, "readmitted": 0, "trackers_dropped": 0}
    capped: set[str] = set()

    def dropped(item: NewItem, n: int) -> None:
        counts["trackers_dropped"] += n
        capped.add(item.info_hash)

    def good() -> Iterator[NewItem]:
        for where, text, base in _sources(items, from_file):
            try:
                item = parse_item(text, base)
            except ItemError as e:
                counts["invalid"] += 1
                click.echo(f"peercrawl add: {where}: {e}", err=True)
                continue
            if extra:
                item = NewItem(item.info_hash, tuple(dict.fromkeys(item.trackers + extra)))
            yield item

    progress = _progress() if from_file is not None and sys.stderr.isatty() else None
    if progress is not None:
        with progress:
            task = progress.add_task("adding", total=None)
            for _, status in queue.add_stream(good(), readmit=readmit, on_dropped=dropped):
                counts[status] += 1
                progress.advance(task)
    else:
        for _, status in queue.add_stream(good(), readmit=readmit, on_dropped=dropped):
            counts[status] += 1
    if counts["trackers_dropped"]:
        n, t = counts["trackers_dropped"], len(capped)
        click.echo(f"peercrawl add: {n} tracker{'s' * (n != 1)} not stored on {t} torrent{'s' * (t != 1)} "
                   f"(at most {ctx.settings.max_trackers_per_torrent} per torrent, "
                   "PEERCRAWL_MAX_TRACKERS_PER_TORRENT)", err=True)
    if as_json:
        click.echo(json.dumps(counts))
    else:
        click.echo(
            f"added {counts['added']}, already tracked {counts['already_tracked']}, "
            f"evicted and skipped {counts['skipped_evicted']}, invalid {counts['invalid']}"
            + (" (use --readmit to re-admit evicted torrents)" if counts["skipped_evicted"] else "")
        )
        if counts["skipped_quarantined"] or counts["readmitted"]:
            click.echo(f"quarantined and skipped {counts['skipped_quarantined']}, "
                       f"quarantined and re-admitted {counts['readmitted']}"
                       + (" (use --readmit to re-admit quarantined torrents)"
                          if counts["skipped_quarantined"] else ""))
    if counts["invalid"]:
        sys.exit(1)


def _progress():
    from rich.console import Console
    from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)
