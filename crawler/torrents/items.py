"""Parsing the ITEMs of ``peercrawl add`` (contract §7) into info-hashes and trackers.

An ITEM is a 40-hex or 32-char base32 info-hash (BitTorrent v1), a magnet
URI, or the path of a ``.torrent`` file. Every failure raises ``ItemError``
with a short reason on one line: the item's text is shown with unprintable
characters escaped (a NUL, a terminal escape, a byte that was not UTF-8 and
arrived as a surrogate escape).

A magnet gives one torrent per distinct v1 topic (``xt=urn:btih:``, also
spelled ``xt.1=``, ``xt.2=``), each with the magnet's ``tr=`` trackers; v2
topics (``urn:btmh:``) beside a v1 one are the same torrent's v2 name and
are passed over, a magnet with only v2 topics is refused. A topic's name is
the display name of its number (``xt.1`` takes ``dn.1``, ``xt`` takes
``dn``); a magnet of one torrent takes its first display name of any
number. A ``.torrent`` gives one torrent: its info-hash is the SHA-1 of the
bencoded ``info`` dictionary as it stands in the file, its trackers
``announce`` and ``announce-list``, its name ``info``'s ``name.utf-8`` or
``name``; a v2-only torrent (BEP 52: ``meta version`` 2 and no v1
``pieces``) is refused, a hybrid one is crawled by its v1 hash. Names are
cleaned and bounded as ``crawler.torrents.torrent_names`` says.

Bounds, so that no item costs more than its size warrants: trackers are
read in one pass, de-duplicated as they come, and only until the per-torrent
cap (``max_trackers``) is reached; the entries past it are counted
(``Parsed.trackers_dropped``: those not equal to a kept one, as written),
not validated. A ``.torrent`` is decoded once, keeping only what is read
here (``_torrent_schema``), within ``TORRENT_MAX_VALUES`` values.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, cast
from urllib.parse import unquote_plus, urlsplit

from crawler import redact
from crawler.bencode import codec as bencode
from crawler.envparse import tracker_url
from crawler.errors import ItemError, one_line
from crawler.torrents.torrent_names import clean, of_torrent

_HEX = re.compile(r"^[0-9a-fA-F]{40}$")
_B32 = re.compile(r"^[A-Za-z2-7]{32}$")
_XT = re.compile(r"xt(?:\.[0-9]+)?")
_DN = re.compile(r"dn(?:\.[0-9]+)?")

# A .torrent larger than this is not a torrent file (big ones are a few MiB).
MAX_TORRENT_FILE = 64 * 1024 * 1024
# The values (bencode's count: every integer, string, list and dictionary) a
# .torrent may hold. libtorrent loads none past 3,000,000 tokens by default
# (load_torrent_limits), and it counts every value as a token at least, so
# every .torrent its clients open fits. Checking them takes 1-2 s at worst,
# where a 64 MiB file of nested empty lists (32 million values) would take
# ten times that.
TORRENT_MAX_VALUES = 3_000_000
# The most trackers read per torrent when the caller names no cap: the
# largest PEERCRAWL_MAX_TRACKERS_PER_TORRENT allows.
MAX_TRACKERS = 10_000


class NewItem(NamedTuple):
    """One torrent to add: a 40-hex info-hash, its own trackers and its name (None: none given).

    The name is stored cleaned (``torrent_names.clean``; ``add`` cleans it
    again, which costs a clean name one check). A named tuple rather than a
    dataclass: bulk intake makes millions.
    """

    info_hash: str
    trackers: tuple[str, ...] = ()
    name: str | None = None
    # a .torrent's own: its total size in bytes and its file count (None: not known, as for a magnet)
    size: int | None = None
    files: int | None = None


class Parsed(NamedTuple):
    """What one ITEM names: its torrents, and how many of their trackers were past the cap.

    ``trackers_dropped`` counts for each torrent of ``items`` (a magnet's
    torrents share its trackers).
    """

    items: tuple[NewItem, ...]
    trackers_dropped: int = 0


def info_hash(text: str) -> str:
    """A v1 info-hash in hex or base32 -> 40 lower-case hex characters."""
    t = text.strip()
    if _HEX.match(t):
        return t.lower()
    if _B32.match(t):
        return base64.b32decode(t.upper()).hex()
    raise ItemError(f"not a 40-hex or 32-char base32 info-hash: {_short(t)}")


class Trackers:
    """Tracker URLs as they are read: validated, de-duplicated in their first order, at most ``cap`` kept.

    ``add`` takes one URL; past the cap it only counts the entries that are
    not a kept one as written (``dropped``), without validating them: each
    costs a set look-up, never a parse. ``strict``: an unusable URL raises
    ``ItemError`` (``where``: what to call it); else it is left out.
    """

    def __init__(self, cap: int, where: str, strict: bool):
        self.cap, self.where, self.strict = max(1, cap), where, strict
        self.kept: dict[str, None] = {}  # validated URL -> None, in first order
        self.seen: set[str] = set()  # the texts of the kept ones, as written
        self.dropped = 0

    def add(self, text: str, decode: Callable[[str], str] | None = None) -> None:
        """Read one URL as written (``decode``: how to get the URL from it, e.g. a query's escapes)."""
        if len(self.kept) >= self.cap:
            self.dropped += text not in self.seen
            return
        try:
            v = tracker_url((text if decode is None else decode(text)).strip())
        except ValueError as e:
            if self.strict:
                raise ItemError(f"{self.where}: {e}") from None
            return
        self.kept[v] = None
        self.seen.add(text)

    def urls(self) -> tuple[str, ...]:
        """The kept URLs, in their first order."""
        return tuple(self.kept)


def trackers_of(urls: list[str], where: str, cap: int = MAX_TRACKERS) -> tuple[str, ...]:
    """Validated, de-duplicated tracker URLs in their first order, at most ``cap``; ``ItemError`` for a bad one."""
    t = Trackers(cap, where, strict=True)
    for u in urls:
        t.add(u)
    return t.urls()


def parse_magnet(uri: str, max_trackers: int = MAX_TRACKERS) -> Parsed:
    """A magnet URI -> one ``NewItem`` per distinct v1 topic, each with the magnet's trackers.

    One pass over the query (``&``-separated, ``+`` and percent escapes as
    in ``parse_qs``), in time linear in its length: ``tr=`` past
    ``max_trackers`` distinct ones are only counted; of the display names
    (``dn=``) only those a topic takes are decoded. Raises ``ItemError``
    for a query that cannot be split, a v1 topic that is not an info-hash,
    an unusable ``tr=`` within the cap, or no v1 topic.
    """
    try:
        query = urlsplit(uri).query
    except ValueError as e:
        raise ItemError(f"bad magnet query: {e}") from None
    hashes: dict[str, str] = {}  # info-hash -> the number of its first topic ("" for plain xt)
    shown: dict[str, str] = {}  # number -> its first display name, as written
    v2 = False
    trackers = Trackers(max_trackers, "magnet tr=", strict=True)
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if "%" in name or "+" in name:
            name = unquote_plus(name)
        if name == "tr":
            trackers.add(value, unquote_plus)
        elif _XT.fullmatch(name):
            topic = unquote_plus(value)
            scheme = topic[:9].lower()
            if scheme == "urn:btih:":
                hashes.setdefault(info_hash(topic[9:]), name[3:])
            elif scheme == "urn:btmh:":
                v2 = True
        elif _DN.fullmatch(name):
            shown.setdefault(name[3:], value)
    if not hashes:
        if v2:
            raise ItemError("magnet has only a v2 (urn:btmh) info-hash; peercrawl needs a v1 urn:btih")
        raise ItemError("magnet has no xt=urn:btih: info-hash")
    urls = trackers.urls()
    if len(hashes) == 1:  # one torrent: its own number's display name, else the first of any number
        ((h, n),) = hashes.items()
        return Parsed((NewItem(h, urls, _shown(shown.get(n, next(iter(shown.values()), None)))),), trackers.dropped)
    return Parsed(tuple(NewItem(h, urls, _shown(shown.get(n))) for h, n in hashes.items()), trackers.dropped)


def _shown(dn: str | None) -> str | None:
    """A magnet's ``dn=`` value (percent and ``+`` escapes as in a query) as a clean name, or None."""
    return None if dn is None else clean(unquote_plus(dn))


def _torrent_schema(urls: Trackers) -> bencode.Keys:
    """What a .torrent's decode keeps: ``announce``, ``announce-list``'s URLs (into ``urls``),
    and of ``info`` its span, ``meta version``, ``name``, ``name.utf-8``, whether ``pieces`` is there,
    ``length`` and each file's ``length``."""
    return bencode.Keys({
        b"announce": bencode.LEAF,
        b"announce-list": bencode.Each(bencode.Each(lambda v: urls.add(v.decode("utf-8", "replace"))
                                                    if isinstance(v, bytes) else None)),
        b"info": bencode.Keys({b"meta version": bencode.LEAF, b"pieces": bencode.SKIP, b"name": bencode.LEAF,
                               b"name.utf-8": bencode.LEAF, b"length": bencode.LEAF,
                               b"files": bencode.Items(bencode.Keys({b"length": bencode.LEAF}))}),
    }, spans=frozenset({b"info"}))


def _size_and_files(info: dict) -> tuple[int | None, int | None]:
    """A v1 info dictionary's total size and file count (BEP 3: ``length``, or ``files`` each with its
    ``length``); (None, None) when they do not read as whole, non-negative numbers."""
    files = info.get(b"files")
    if isinstance(files, list):
        lengths = [f.get(b"length") if isinstance(f, dict) else None for f in files]
        if files and all(isinstance(n, int) and n >= 0 for n in lengths):
            return sum(cast(list[int], lengths)), len(lengths)  # each an int: checked just above
        return None, None
    length = info.get(b"length")
    return (length, 1) if isinstance(length, int) and length >= 0 else (None, None)


def parse_torrent(data: bytes, name: str = ".torrent", max_trackers: int = MAX_TRACKERS) -> Parsed:
    """The bytes of a .torrent file -> its one ``NewItem``.

    Decoded in one pass within ``TORRENT_MAX_VALUES`` values, keeping only
    the trackers (at most ``max_trackers``; unusable URLs left out), the
    span of ``info`` and its name (``torrent_names.of_torrent``). Raises
    ``ItemError`` for bytes that are not one bencoded dictionary with an
    ``info`` dictionary, past the budget, or a v2-only torrent.
    """
    name = _file(name)
    if not data.startswith(b"d"):
        raise ItemError(f"{name} is not a bencoded dictionary")
    # One more than the cap, so an announce read after the list still goes first.
    listed = Trackers(max_trackers + 1, "announce-list", strict=False)
    try:
        top = bencode.decode(data, _torrent_schema(listed), max_values=TORRENT_MAX_VALUES)
    except bencode.TooManyValues as e:
        raise ItemError(f"{name} holds {e}; no real .torrent holds so many") from None
    except bencode.BencodeError as e:
        raise ItemError(f"{name} is not valid bencode: {e}") from None
    info = top.get(b"info") if isinstance(top, dict) else None
    if not isinstance(info, dict):
        raise ItemError(f"{name} has no info dictionary")
    version = info.get(b"meta version")
    if isinstance(version, int) and version >= 2 and b"pieces" not in info:
        raise ItemError(f"{name} is a v2-only torrent (BEP 52, no v1 pieces); peercrawl crawls v1 and "
                        "hybrid torrents by their v1 info-hash")
    assert isinstance(top, bencode.Record)  # a dictionary, as the info in it says: Keys with spans gives a Record
    start, end = top.spans[b"info"]
    digest = hashlib.sha1(memoryview(data)[start:end]).hexdigest()
    urls = Trackers(max_trackers, "announce", strict=False)
    announce = top.get(b"announce")
    if isinstance(announce, bytes):
        urls.add(announce.decode("utf-8", "replace"))
    for u in listed.urls():
        urls.add(u)
    named = of_torrent(info.get(b"name"), info.get(b"name.utf-8"))
    size, files = _size_and_files(info)
    return Parsed((NewItem(digest, urls.urls(), named, size, files),), listed.dropped + urls.dropped)


def parse_items(text: str, base: Path | None = None, max_trackers: int = MAX_TRACKERS) -> Parsed:
    """One ITEM -> the torrents it names; raises ``ItemError`` saying why not.

    ``base``: the directory a relative .torrent path is read from;
    ``max_trackers``: the most trackers read per torrent (the rest counted).
    """
    t = text.strip()
    if len(t) == 40 and _HEX.match(t):  # the bulk case first
        return Parsed((NewItem(t.lower()),))
    if not t:
        raise ItemError("empty item")
    if t.lower().startswith("magnet:"):
        return parse_magnet(t, max_trackers)
    if _HEX.match(t) or _B32.match(t):
        return Parsed((NewItem(info_hash(t)),))
    if "\x00" in t:
        # No hash, magnet or file name holds one; the OS would refuse the name.
        raise ItemError(f"holds a NUL byte: {_file(t)}")
    if re.match(r"(?i)(https?|ftp)://", t):
        # peercrawl fetches nothing a catalogue names: no request on behalf of an item
        raise ItemError(f"a URL is not an item: download the .torrent and add the file ({_short(redact.url(t))})")
    try:
        path = Path(t).expanduser()
    except RuntimeError:  # "~name/..." with no such user
        raise ItemError(f"cannot find the home directory in {_short(t)}") from None
    if base is not None and not path.is_absolute():
        path = base / path
    if path.suffix.lower() == ".torrent" or _exists(path):
        return parse_torrent(_read(path, t), t, max_trackers)
    if re.fullmatch(r"[0-9a-fA-F]+", t):
        raise ItemError(f"hex info-hash must have 40 characters, this has {len(t)}: {_short(t)}")
    hint = " (and not UTF-8 text)" if _UNDECODED.search(t) else ""
    raise ItemError(f"not an info-hash, magnet URI or .torrent file{hint}: {_short(t)}")


def parse_item(text: str, base: Path | None = None) -> NewItem:
    """One ITEM that names one torrent -> its ``NewItem``; ``ItemError`` if it names several (use ``parse_items``)."""
    parsed = parse_items(text, base)
    if len(parsed.items) > 1:
        raise ItemError(f"names {len(parsed.items)} torrents, not one: {_short(text.strip())}")
    return parsed.items[0]


def _exists(path: Path) -> bool:
    """Whether ``path`` names something; a name too long to be a file is not one, other errors are (to be reported)."""
    try:
        return path.exists()
    except OSError as e:
        return e.errno != errno.ENAMETOOLONG


def _read(path: Path, t: str) -> bytes:
    """The bytes of the .torrent at ``path`` (``t`` as the user wrote it); ItemError if unreadable or too big."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise ItemError(f"{_file(t)} is a directory")
        if not stat.S_ISREG(st.st_mode):
            # A device or FIFO could be endless (/dev/zero) or block forever.
            raise ItemError(f"{_file(t)} is not a regular file")
        if st.st_size > MAX_TORRENT_FILE:
            raise ItemError(f"{_file(t)}: larger than {MAX_TORRENT_FILE // (1024 * 1024)} MiB, not a .torrent")
        with path.open("rb") as f:
            data = f.read(MAX_TORRENT_FILE + 1)  # the file may have grown since stat
    except FileNotFoundError:
        raise ItemError(f"no such file: {_file(t)}") from None
    except IsADirectoryError:
        raise ItemError(f"{_file(t)} is a directory") from None
    except OSError as e:
        raise ItemError(f"cannot read {_file(t)}: {e.strerror or e}") from None
    if len(data) > MAX_TORRENT_FILE:
        raise ItemError(f"{_file(t)}: larger than {MAX_TORRENT_FILE // (1024 * 1024)} MiB, not a .torrent")
    return data


# Bytes that were not UTF-8, kept as surrogate escapes (argv and --from lines).
_UNDECODED = re.compile("[\udc80-\udcff]")


def _short(t: str) -> str:
    """``t`` for a one-line message: at most 60 characters, anything unprintable escaped."""
    return one_line(t, 60)


def _file(t: str) -> str:
    """A file name for a one-line message: its end kept (the name itself), anything unprintable escaped."""
    return one_line(t if len(t) <= 200 else "..." + t[-197:], 200)
