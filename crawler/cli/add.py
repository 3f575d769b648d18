"""``peercrawl add``: admit torrents to the queue (contract §1, §7)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import click

from crawler.cli.context import open_context
from crawler.errors import ItemError
from crawler.queue.due_now import DueNow
from crawler.queue.lanes import USER_LANES
from crawler.queue.queue import Queue
from crawler.queue.torrent_metadata import TorrentMetadata
from crawler.torrents.intake import good_items, item_sources
from crawler.torrents.items import NewItem, trackers_of


def admit(ctx, sources: Iterator[tuple[str, str | ItemError, Path | None]], *, readmit: bool = False,
          extra: tuple[str, ...] = (), who: str = "peercrawl add", show_progress: bool = False,
          lane: str | None = None, due_now: bool = False) -> dict[str, int]:
    """Parse every ITEM of ``sources`` and add the good ones to ``ctx``'s queue; returns the counts.

    ``sources`` yields ``(where, text or ItemError, base directory)`` as
    ``intake.item_sources`` does. Each bad item, whatever went wrong while parsing it, is
    one line on stderr (``who: where: reason``) and counts as ``invalid``; the
    good ones are still added; an item that names several torrents (a magnet
    with several ``xt=urn:btih:``) adds each. ``extra`` trackers are added to
    every item.
    ``lane``: the lane of every item, tracked ones moved into it (None: new
    ones normal, tracked ones keep theirs). ``due_now``: tracked ones that
    cool are made due at once (``crawler.queue.due_now``; new ones are).
    Trackers past PEERCRAWL_MAX_TRACKERS_PER_TORRENT (not read past it, or
    not stored) are reported in one line.
    """
    queue = Queue(ctx.client, ctx.keys, ctx.settings)
    counts = {"added": 0, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0,
              "skipped_quarantined": 0, "readmitted": 0, "trackers_dropped": 0, "made_due": 0}
    capped: set[str] = set()
    due = DueNow(ctx.client, ctx.keys) if due_now else None
    metadata = TorrentMetadata(ctx.client, ctx.keys)

    def added(item: NewItem, status: str) -> None:
        counts[status] += 1
        if item.files is not None and status in ("added", "already_tracked", "readmitted"):
            # a .torrent holds its metadata: its size and file count kept as a BEP 9 fetch's would be
            metadata.found(item.info_hash, None, item.size, item.files, time.time())
        if due is not None and status == "already_tracked" and due.make_due(item.info_hash) == "due":
            counts["made_due"] += 1

    def dropped(item: NewItem, n: int) -> None:
        counts["trackers_dropped"] += n
        capped.add(item.info_hash)

    def bad(where: str, reason: str) -> None:
        counts["invalid"] += 1
        click.echo(f"{who}: {where}: {reason}", err=True)

    good = good_items(sources, ctx.settings.max_trackers_per_torrent, extra, bad, dropped)
    progress = _progress() if show_progress else None
    if progress is not None:
        with progress:
            task = progress.add_task("adding", total=None)
            for item, status in queue.add_stream(good, readmit=readmit, on_dropped=dropped, lane=lane):
                added(item, status)
                progress.advance(task)
    else:
        for item, status in queue.add_stream(good, readmit=readmit, on_dropped=dropped, lane=lane):
            added(item, status)
    if counts["trackers_dropped"]:
        n, t = counts["trackers_dropped"], len(capped)
        click.echo(f"{who}: {n} tracker{'s' * (n != 1)} not stored on {t} torrent{'s' * (t != 1)} "
                   f"(at most {ctx.settings.max_trackers_per_torrent} per torrent, "
                   "PEERCRAWL_MAX_TRACKERS_PER_TORRENT)", err=True)
    return counts


@click.command("add")
@click.argument("items", nargs=-1)
@click.option("--from", "from_file", type=click.File("rb"),
              help="Read one ITEM per line from FILE, or - for stdin; blank and # lines are skipped. "
                   "UTF-8, or UTF-16/UTF-32 with a byte-order mark.")
@click.option("--tracker", "trackers", multiple=True, metavar="URL",
              help="A tracker to add to every item (repeatable).")
@click.option("--readmit", is_flag=True,
              help="Re-admit evicted torrents (score back to 1.0) and quarantined ones (score kept).")
@click.option("--lane", type=click.Choice(USER_LANES),
              help="The lane of these torrents, claimed in order high, normal, low (tracked ones move to it; "
                   "default: new ones normal, tracked ones keep theirs).")
@click.option("--due-now", is_flag=True,
              help="Make tracked torrents that wait for their next visit due at once (new ones are).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def command(items: tuple[str, ...], from_file: BinaryIO | None, trackers: tuple[str, ...], readmit: bool,
            lane: str | None, due_now: bool, as_json: bool) -> None:
    """Add torrents: ITEM is a 40-hex or base32 info-hash, a magnet URI (each of its
    xt=urn:btih: hashes) or a .torrent file.

    A torrent already tracked keeps its score, state and lane (its trackers
    are merged; ``--lane`` moves it). Bad items are reported one per line on stderr; the good ones are
    still added, and the exit code is 1.
    """
    if not items and from_file is None:
        raise click.UsageError("give ITEMs or --from FILE")
    try:
        extra = trackers_of(list(trackers), "--tracker")
    except ItemError as e:
        raise click.BadParameter(str(e).split(": ", 1)[-1], param_hint="--tracker") from None
    ctx = open_context()
    counts = admit(ctx, item_sources(items, from_file), readmit=readmit, extra=extra, who="peercrawl add",
                   show_progress=from_file is not None and sys.stderr.isatty(), lane=lane, due_now=due_now)
    if as_json:
        click.echo(json.dumps(counts))
    else:
        click.echo(
            f"added {counts['added']}, already tracked {counts['already_tracked']}, "
            f"evicted and skipped {counts['skipped_evicted']}, invalid {counts['invalid']}"
            + (" (use --readmit to re-admit evicted torrents)" if counts["skipped_evicted"] else "")
            + (f", made due now {counts['made_due']}" if due_now else "")
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
