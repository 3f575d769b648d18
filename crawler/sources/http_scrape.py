"""HTTP tracker scrapes (BEP 48), sans-IO: the scrape URL, the request, the reply.

A tracker's scrape URL comes from its announce URL by BEP 48's rule: when
the last ``/``-separated part of the path begins with ``announce``, that
``announce`` becomes ``scrape`` (``/announce.php?passkey=x`` gives
``/scrape.php?passkey=x``); otherwise the tracker has no scrape
(``scrape_url`` is None). One request asks for several torrents by repeating
``info_hash`` (``MAX_HASHES`` at most: what trackers commonly take, and a
URL of some 4.5 kB). The reply's ``files`` dictionary holds the counts of
the torrents the tracker knows; one it does not know is absent (the caller
decides what that means). Only the asked hashes' entries are decoded.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from crawler.bencode import codec as bencode
from crawler.sources.http_codec import MAX_COUNT, decode_reply
from crawler.sources.tracker_errors import HttpReplyError

# Torrents one HTTP scrape asks for.
MAX_HASHES = 64

_COUNTS = bencode.Keys({b"complete": bencode.LEAF, b"incomplete": bencode.LEAF, b"downloaded": bencode.LEAF})


@dataclass(frozen=True)
class ScrapeCounts:
    """One torrent's counts in a scrape reply: seeders, leechers and completed downloads."""

    seeders: int
    leechers: int
    completed: int


def scrape_url(announce: str) -> str | None:
    """The scrape URL of the tracker whose announce URL is ``announce`` (BEP 48), or None."""
    parts = urllib.parse.urlsplit(announce)
    head, _, last = parts.path.rpartition("/")
    if not last.startswith("announce"):
        return None
    return urllib.parse.urlunsplit(parts._replace(path=f"{head}/scrape{last[len('announce'):]}"))


def scrape_request(base: str, info_hashes: list[bytes]) -> str:
    """The scrape URL for ``info_hashes`` (1 to ``MAX_HASHES`` of 20 bytes): ``base`` plus one
    ``info_hash`` per torrent, binary percent-encoded. ``base`` may carry a query (a passkey)."""
    if not 1 <= len(info_hashes) <= MAX_HASHES or any(len(h) != 20 for h in info_hashes):
        raise ValueError(f"a scrape asks for 1..{MAX_HASHES} info-hashes of 20 bytes")
    sep = "&" if "?" in base else "?"
    return base + sep + "&".join("info_hash=" + urllib.parse.quote_from_bytes(h, safe="") for h in info_hashes)


def parse_scrape_reply(body: bytes, info_hashes: list[bytes]) -> dict[bytes, ScrapeCounts]:
    """The counts of each of ``info_hashes`` the reply holds (a torrent it leaves out is absent).

    Raises ``TrackerRefused`` for ``failure reason``, ``HttpReplyError`` for
    anything malformed (an asked torrent's entry without whole counts
    included) and for a reply of more than ``http_codec.REPLY_MAX_VALUES`` values (the
    announce replies' budget: ``MAX_HASHES`` entries of a few values each, and
    the rest of a reply that lists more torrents than asked, checked only).
    Counts above ``MAX_COUNT`` are refused, as in announce replies.
    """
    schema = bencode.Keys({b"failure reason": bencode.LEAF,
                           b"files": bencode.Keys({h: _COUNTS for h in info_hashes})})
    d = decode_reply(body, schema, "scrape reply", "tracker refused the scrape")
    files = d.get(b"files", {})
    if not isinstance(files, dict):
        raise HttpReplyError("scrape reply's 'files' is not a dictionary")
    out = {}
    for h in info_hashes:
        entry = files.get(h)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise HttpReplyError(f"scrape entry of {h.hex()} is not a dictionary")
        counts = [entry.get(k, 0 if k == b"downloaded" else None) for k in (b"complete", b"incomplete", b"downloaded")]
        if not all(isinstance(c, int) and 0 <= c <= MAX_COUNT for c in counts):
            raise HttpReplyError(f"scrape entry of {h.hex()} lacks whole counts")
        out[h] = ScrapeCounts(*counts)
    return out
