"""Parsing the ITEMs of ``peercrawl add`` (SPEC §7) into info-hashes and trackers.

An ITEM is a 40-hex or 32-char base32 info-hash (BitTorrent v1), a magnet
URI (``xt=urn:btih:...``, trackers from ``tr=``), or the path of a
``.torrent`` file (info-hash = SHA-1 of the bencoded ``info`` dictionary as it
stands in the file; trackers from ``announce`` and ``announce-list``). Every
failure raises ``ItemError`` with a short reason on one line: the item's text
is shown with unprintable characters escaped (a NUL, a terminal escape, a
byte that was not UTF-8 and arrived as a surrogate escape).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import re
import stat
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit

from crawler import bencode
from crawler.envparse import tracker_url
from crawler.errors import ItemError, one_line

_HEX = re.compile(r"^[0-9a-fA-F]{40}$")
_B32 = re.compile(r"^[A-Za-z2-7]{32}$")

# A .torrent larger than this is not a torrent file (big ones are a few MiB).
MAX_TORRENT_FILE = 64 * 1024 * 1024


class NewItem(NamedTuple):
    """One torrent to add: a 40-hex info-hash and its own trackers.

    A named tuple rather than a dataclass: bulk intake makes millions.
    """

    info_hash: str
    trackers: tuple[str, ...] = ()


def info_hash(text: str) -> str:
    """A v1 info-hash in hex or base32 -> 40 lower-case hex characters."""
    t = text.strip()
    if _HEX.match(t):
        return t.lower()
    if _B32.match(t):
        return base64.b32decode(t.upper()).hex()
    raise ItemError(f"not a 40-hex or 32-char base32 info-hash: {_short(t)}")


def trackers_of(urls: list[str], where: str) -> tuple[str, ...]:
    """Validated, de-duplicated tracker URLs in their first order."""
    out: list[str] = []
    for u in urls:
        try:
            v = tracker_url(u.strip())
        except ValueError as e:
            raise ItemError(f"{where}: {e}") from None
        if v not in out:
            out.append(v)
    return tuple(out)


def parse_magnet(uri: str) -> NewItem:
    """A magnet URI with an ``urn:btih`` topic -> NewItem."""
    try:
        query = urlsplit(uri).query
        params = parse_qs(query, keep_blank_values=True, strict_parsing=False)
    except ValueError as e:
        raise ItemError(f"bad magnet query: {e}") from None
    hashes = [x[len("urn:btih:"):] for x in params.get("xt", []) if x.lower().startswith("urn:btih:")]
    if not hashes:
        if any(x.lower().startswith("urn:btmh:") for x in params.get("xt", [])):
            raise ItemError("magnet has only a v2 (urn:btmh) info-hash; peercrawl needs a v1 urn:btih")
        raise ItemError("magnet has no xt=urn:btih: info-hash")
    return NewItem(info_hash(hashes[0]), trackers_of(params.get("tr", []), "magnet tr="))


def parse_torrent(data: bytes, name: str = ".torrent") -> NewItem:
    """The bytes of a .torrent file -> NewItem."""
    name = _file(name)
    if not data.startswith(b"d"):
        raise ItemError(f"{name} is not a bencoded dictionary")
    try:
        top = bencode.decode(data)
        span = _info_span(data)
    except bencode.BencodeError as e:
        raise ItemError(f"{name} is not valid bencode: {e}") from None
    if not isinstance(top, dict) or span is None or not isinstance(top.get(b"info"), dict):
        raise ItemError(f"{name} has no info dictionary")
    digest = hashlib.sha1(data[span[0]:span[1]]).hexdigest()
    urls: list[str] = []
    announce = top.get(b"announce")
    if isinstance(announce, bytes):
        urls.append(announce.decode("utf-8", "replace"))
    tiers = top.get(b"announce-list")
    if isinstance(tiers, list):
        for tier in tiers:
            if isinstance(tier, list):
                urls.extend(u.decode("utf-8", "replace") for u in tier if isinstance(u, bytes))
    # A tracker we cannot use (wss://, garbage) should not make the whole
    # torrent unusable: keep the usable ones.
    good = []
    for u in urls:
        try:
            good.append(tracker_url(u.strip()))
        except ValueError:
            continue
    return NewItem(digest, tuple(dict.fromkeys(good)))


def _info_span(data: bytes) -> tuple[int, int] | None:
    """Byte span of the top-level ``info`` value as it stands in ``data``."""
    i = 1
    while i < len(data) and data[i:i + 1] != b"e":
        key, i = bencode.decode_prefix(data, i)
        start = i
        _, i = bencode.decode_prefix(data, i)
        if key == b"info":
            return start, i
    return None


def parse_item(text: str, base: Path | None = None) -> NewItem:
    """One ITEM -> NewItem; raises ``ItemError`` saying why not."""
    t = text.strip()
    if len(t) == 40 and _HEX.match(t):  # the bulk case first
        return NewItem(t.lower())
    if not t:
        raise ItemError("empty item")
    if t.lower().startswith("magnet:"):
        return parse_magnet(t)
    if _HEX.match(t) or _B32.match(t):
        return NewItem(info_hash(t))
    if "\x00" in t:
        # No hash, magnet or file name holds one; the OS would refuse the name.
        raise ItemError(f"holds a NUL byte: {_file(t)}")
    try:
        path = Path(t).expanduser()
    except RuntimeError:  # "~name/..." with no such user
        raise ItemError(f"cannot find the home directory in {_short(t)}") from None
    if base is not None and not path.is_absolute():
        path = base / path
    if path.suffix.lower() == ".torrent" or _exists(path):
        return parse_torrent(_read(path, t), t)
    if re.fullmatch(r"[0-9a-fA-F]+", t):
        raise ItemError(f"hex info-hash must have 40 characters, this has {len(t)}: {_short(t)}")
    hint = " (and not UTF-8 text)" if _UNDECODED.search(t) else ""
    raise ItemError(f"not an info-hash, magnet URI or .torrent file{hint}: {_short(t)}")


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
