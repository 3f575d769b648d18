"""``peercrawl add``: admit torrents to the queue (SPEC §1, §7)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import click

from crawler.cli.context import open_context
from crawler.errors import ItemError
from crawler.queue.items import NewItem, parse_items, trackers_of
from crawler.queue.lanes import USER_LANES
from crawler.queue.transitions import Queue


def _sources(items: tuple[str, ...], from_file: BinaryIO | None) -> Iterator[tuple[str, str | ItemError, Path | None]]:
    """(where, text, base directory) for every ITEM: arguments, then --from lines.

    In place of the text, an ``ItemError`` to report when a line (or the
    whole file) cannot be read as text.
    """
    for n, text in enumerate(items, 1):
        yield f"argument {n}", text, None
    if from_file is not None:
        name = getattr(from_file, "name", "-")
        base = None if name in ("-", "<stdin>") else Path(name).parent
        label = "stdin" if base is None else name
        try:
            for n, line in _lines(from_file):
                if isinstance(line, ItemError):
                    yield f"{label} line {n}", line, base
                    continue
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                yield f"{label} line {n}", text, base
        except ItemError as e:
            yield label, e, None
        except OSError as e:
            yield label, ItemError(f"reading stopped: {e.strerror or e}"), None


# Byte-order marks, longest first (UTF-32 LE's begins with UTF-16 LE's).
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xef\xbb\xbf", "utf-8"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


# Far longer than any item (a magnet with thousands of trackers); a longer
# "line" is a file that is not a list, and is not held in memory whole.
MAX_LINE = 4 * 1024 * 1024


def _lines(f: BinaryIO) -> Iterator[tuple[int, str | ItemError]]:
    """Numbered lines of a --from file as text, or an ``ItemError`` for a line longer than ``MAX_LINE``.

    UTF-8, its BOM skipped if it has one; UTF-16 and UTF-32 with a BOM
    (Windows editors write them). Bytes that are not UTF-8 become surrogate
    escapes, as in POSIX argv: a line naming a file by its raw bytes still
    finds it, and any other such line is refused as an item with the bytes
    shown. A first line that is a quarter NUL bytes is UTF-16 or UTF-32
    without a BOM, which cannot be read safely: ``ItemError`` raised for the
    file.
    """
    head = f.peek(4)[:4] if hasattr(f, "peek") else b""
    encoding = next((enc for bom, enc in _BOMS if head.startswith(bom)), None)
    wide = encoding in ("utf-16", "utf-32")
    stream = io.TextIOWrapper(f, encoding=encoding, errors="replace") if wide else f
    newline = "\n" if wide else b"\n"
    n = 0
    while line := stream.readline(MAX_LINE + 1):
        n += 1
        if len(line) > MAX_LINE and not line.endswith(newline):
            while (rest := stream.readline(MAX_LINE)) and not rest.endswith(newline):
                pass
            yield n, ItemError(f"longer than {MAX_LINE // (1024 * 1024)} MiB, not an item")
            continue
        if wide:
            yield n, line
            continue
        if n == 1:
            if encoding == "utf-8":
                line = line[3:]
            elif line.count(b"\x00") * 4 >= len(line) > 0:
                raise ItemError("holds NUL bytes between its characters: UTF-16 or UTF-32 text without "
                                "a byte-order mark? Save it as UTF-8")
        yield n, line.decode("utf-8", "surrogateescape")


def admit(ctx, sources: Iterator[tuple[str, str | ItemError, Path | None]], *, readmit: bool = False,
          extra: tuple[str, ...] = (), who: str = "peercrawl add", show_progress: bool = False,
          lane: str | None = None) -> dict[str, int]:
    """Parse every ITEM of ``sources`` and add the good ones to ``ctx``'s queue; returns the counts.

    ``sources`` yields ``(where, text or ItemError, base directory)`` as
    ``_sources`` does. Each bad item, whatever went wrong while parsing it, is
    one line on stderr (``who: where: reason``) and counts as ``invalid``; the
    good ones are still added; an item that names several torrents (a magnet
    with several ``xt=urn:btih:``) adds each. ``extra`` trackers are added to
    every item.
    ``lane``: the lane of every item, tracked ones moved into it (None: new
    ones normal, tracked ones keep theirs).
    Trackers past PEERCRAWL_MAX_TRACKERS_PER_TORRENT (not read past it, or
    not stored) are reported in one line.
    """
    queue = Queue(ctx.client, ctx.keys, ctx.settings)
    counts = {"added": 0, "already_tracked": 0, "skipped_evicted": 0, "invalid": 0,
              "skipped_quarantined": 0, "readmitted": 0, "trackers_dropped": 0}
    capped: set[str] = set()

    def dropped(item: NewItem, n: int) -> None:
        counts["trackers_dropped"] += n
        capped.add(item.info_hash)

    good = _items(sources, ctx.settings.max_trackers_per_torrent, extra, who, counts, dropped)
    progress = _progress() if show_progress else None
    if progress is not None:
        with progress:
            task = progress.add_task("adding", total=None)
            for _, status in queue.add_stream(good, readmit=readmit, on_dropped=dropped, lane=lane):
                counts[status] += 1
                progress.advance(task)
    else:
        for _, status in queue.add_stream(good, readmit=readmit, on_dropped=dropped, lane=lane):
            counts[status] += 1
    if counts["trackers_dropped"]:
        n, t = counts["trackers_dropped"], len(capped)
        click.echo(f"{who}: {n} tracker{'s' * (n != 1)} not stored on {t} torrent{'s' * (t != 1)} "
                   f"(at most {ctx.settings.max_trackers_per_torrent} per torrent, "
                   "PEERCRAWL_MAX_TRACKERS_PER_TORRENT)", err=True)
    return counts


def _items(sources: Iterator[tuple[str, str | ItemError, Path | None]], cap: int, extra: tuple[str, ...],
           who: str, counts: dict[str, int], dropped: Callable[[NewItem, int], None]) -> Iterator[NewItem]:
    """The torrents of the good ITEMs of ``sources``, each with ``extra`` trackers added.

    A bad item is one line on stderr and counts as ``invalid``; trackers read
    no further than ``cap`` per torrent, those past it handed to ``dropped``.
    """
    for where, text, base in sources:
        try:
            if isinstance(text, ItemError):
                raise text
            parsed = parse_items(text, base, cap)
        except ItemError as e:
            counts["invalid"] += 1
            click.echo(f"{who}: {where}: {e}", err=True)
            continue
        except Exception as e:  # noqa: BLE001 - a fault in one item's parsing costs that item, not the batch
            counts["invalid"] += 1
            click.echo(f"{who}: {where}: cannot parse this item: {type(e).__name__}: "
                       + " ".join(str(e).split())[:200], err=True)
            continue
        for item in parsed.items:
            if parsed.trackers_dropped:
                dropped(item, parsed.trackers_dropped)
            if extra:
                item = NewItem(item.info_hash, tuple(dict.fromkeys(item.trackers + extra)))
            yield item


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
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def command(items: tuple[str, ...], from_file: BinaryIO | None, trackers: tuple[str, ...], readmit: bool,
            lane: str | None, as_json: bool) -> None:
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
    counts = admit(ctx, _sources(items, from_file), readmit=readmit, extra=extra, who="peercrawl add",
                   show_progress=from_file is not None and sys.stderr.isatty(), lane=lane)
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
