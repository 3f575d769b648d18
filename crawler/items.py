"""Parsing the ITEMs of ``peercrawl add`` (SPEC §7) into info-hashes and trackers.

An ITEM is a 40-hex or 32-char base32 info-hash (BitTorrent v1), a magnet
URI (``xt=urn:btih:...``, trackers from ``tr=``), or the path of a
``.torrent`` file (info-hash = SHA-1 of the bencoded ``info`` dictionary as it
stands in the file; trackers from ``announce`` and ``announce-list``). Every
failure raises ``ItemError`` with a short reason.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from crawler import bencode
from crawler.errors import ItemError
from crawler.lifecycle import NewItem
from crawler.settings import tracker_url

_HEX = re.compile(r"^[0-9a-fA-F]{40}$")
_B32 = re.compile(r"^[A-Za-z2-7]{32}$")

# A .torrent larger than this is not a torrent file (big ones are a few MiB).
MAX_TORRENT_FILE = 64 * 1024 * 1024


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
    query = urlsplit(uri).query
    try:
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
    path = Path(t).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    if path.suffix.lower() == ".torrent" or path.exists():
        try:
            size = path.stat().st_size
            if size > MAX_TORRENT_FILE:
                raise ItemError(f"{t}: larger than {MAX_TORRENT_FILE // (1024 * 1024)} MiB, not a .torrent")
            data = path.read_bytes()
        except FileNotFoundError:
            raise ItemError(f"no such file: {t}") from None
        except IsADirectoryError:
            raise ItemError(f"{t} is a directory") from None
        except OSError as e:
            raise ItemError(f"cannot read {t}: {e.strerror}") from None
        return parse_torrent(data, t)
    if re.fullmatch(r"[0-9a-fA-F]+", t):
        raise ItemError(f"hex info-hash must have 40 characters, this has {len(t)}: {_short(t)}")
    raise ItemError(f"not an info-hash, magnet URI or .torrent file: {_short(t)}")


def _short(t: str) -> str:
    return t if len(t) <= 60 else t[:57] + "..."

