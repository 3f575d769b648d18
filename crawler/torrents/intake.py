"""What ``add`` and ``run`` are handed, read into torrents for the queue.

ITEMs come as arguments or as the lines of a ``--from`` file (``item_sources``,
``lines_of``: any encoding an editor writes, lines bounded so a file that is
not a list is never held whole), and become ``NewItem``s (``good_items``:
``items.parse_items`` on each, every bad one reported in one line and the
rest kept), each with its trackers and its name (a magnet's ``dn=``, a
``.torrent``'s ``info.name``, cleaned by ``crawler.torrents.torrent_names``).
``Queue.add_stream`` then admits them in batches. No terminal
here: the caller says how a bad item is shown.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from crawler.errors import ItemError
from crawler.torrents.items import NewItem, parse_items


def item_sources(items: tuple[str, ...], from_file: BinaryIO | None) -> Iterator[tuple[str, str | ItemError, Path | None]]:
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
            for n, line in lines_of(from_file):
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


def lines_of(f: BinaryIO) -> Iterator[tuple[int, str | ItemError]]:
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
    # text for the wide encodings, else bytes: each line is what its stream gives
    stream: IO[Any] = io.TextIOWrapper(f, encoding=encoding, errors="replace") if wide else f
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


def good_items(sources: Iterator[tuple[str, str | ItemError, Path | None]], cap: int, extra: tuple[str, ...],
               bad: Callable[[str, str], None], dropped: Callable[[NewItem, int], None]) -> Iterator[NewItem]:
    """The torrents of the good ITEMs of ``sources``, each with ``extra`` trackers added and its name kept.

    A bad item, whatever went wrong while parsing it, is handed to ``bad``
    as ``(where, reason)`` in one line and costs that item alone; trackers
    read no further than ``cap`` per torrent, those past it handed to
    ``dropped``.
    """
    for where, text, base in sources:
        try:
            if isinstance(text, ItemError):
                raise text
            parsed = parse_items(text, base, cap)
        except ItemError as e:
            bad(where, str(e))
            continue
        except Exception as e:  # noqa: BLE001 - a fault in one item's parsing costs that item, not the batch
            bad(where, f"cannot parse this item: {type(e).__name__}: " + " ".join(str(e).split())[:200])
            continue
        for item in parsed.items:
            if parsed.trackers_dropped:
                dropped(item, parsed.trackers_dropped)
            if extra:
                item = item._replace(trackers=tuple(dict.fromkeys(item.trackers + extra)))
            yield item
