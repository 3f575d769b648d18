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

A ``files`` key is an asked info-hash as its 20 bytes, or as WebTorrent's
``bittorrent-tracker`` writes it: its bencode library keys a dictionary by
text, so the hash's bytes are read as Latin-1 and the key written as UTF-8
(``webtorrent_key``: each byte from 0x80 up becomes two, a 20-byte hash a key
of up to 40). Both are read as the hash. Every other key (a hash in hex, a
torrent not asked) is counted, not decoded, so the caller can tell a reply
that says nothing of a torrent from one it cannot read (``ScrapeFound``).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from crawler.bencode import codec as bencode
from crawler.sources.trackers.http_codec import MAX_COUNT, decode_reply
from crawler.sources.trackers.tracker_errors import HttpReplyError

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


def webtorrent_key(info_hash: bytes) -> bytes:
    """``info_hash`` as WebTorrent's ``bittorrent-tracker`` keys it in ``files``: its bytes read as Latin-1,
    written as UTF-8 (the hash itself when no byte is 0x80 or above)."""
    return info_hash.decode("latin-1").encode("utf-8")


class ScrapeFound(dict):
    """The counts of the asked torrents a scrape reply lists, keyed by the asked hash.

    ``files``: the reply held a ``files`` dictionary (every tracker's scrape
    reply does, empty or not: one without it is no scrape reply); ``listed``:
    the keys it held; ``others``: how many of them are no asked hash in either
    form (``webtorrent_key``): a reply keyed some other way, or listing
    torrents not asked. With ``files`` and ``others`` at 0, a torrent absent
    here is one the reply does not list.
    """

    __slots__ = ("files", "listed", "others")
    files: bool
    listed: int
    others: int


class _FilesKeys(Mapping):
    """The schema of a reply's ``files``: each form of each asked hash read as counts.

    The bencode reader looks each key of a ``Keys`` dictionary up once, kept
    or not; the lookups are counted here, every key that is no form of an
    asked hash apart, and nothing of such a key is kept.
    """

    def __init__(self, info_hashes: list[bytes]):
        self.forms: dict[bytes, bytes] = {}
        for h in info_hashes:
            self.forms[h] = h
        for h in info_hashes:
            self.forms.setdefault(webtorrent_key(h), h)
        self.listed = self.others = 0

    def __getitem__(self, key: bytes) -> object:
        self.listed += 1
        if key in self.forms:
            return _COUNTS
        self.others += 1
        raise KeyError(key)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.forms)

    def __len__(self) -> int:
        return len(self.forms)


def parse_scrape_reply(body: bytes, info_hashes: list[bytes]) -> ScrapeFound:
    """The counts of each of ``info_hashes`` the reply holds (a torrent it leaves out is absent),
    with how its ``files`` keys matched the hashes asked (``ScrapeFound``).

    An entry keyed by the hash's 20 bytes wins over one keyed by
    ``webtorrent_key``. Raises ``TrackerRefused`` for ``failure reason``,
    ``HttpReplyError`` for anything malformed (an asked torrent's entry
    without whole counts included) and for a reply of more than
    ``http_codec.REPLY_MAX_VALUES`` values (the announce replies' budget:
    ``MAX_HASHES`` entries of a few values each, and the rest of a reply that
    lists more torrents than asked, checked only). Counts above
    ``MAX_COUNT`` are refused, as in announce replies.
    """
    asked = _FilesKeys(info_hashes)
    schema = bencode.Keys({b"failure reason": bencode.LEAF, b"files": bencode.Keys(asked)})
    d = decode_reply(body, schema, "scrape reply", "tracker refused the scrape")
    files = d.get(b"files")
    if files is not None and not isinstance(files, dict):
        raise HttpReplyError("scrape reply's 'files' is not a dictionary")
    out = ScrapeFound()
    out.files, out.listed, out.others = files is not None, asked.listed, asked.others
    files = files or {}
    for key, entry in files.items():
        h = asked.forms[key]
        if not isinstance(entry, dict):
            raise HttpReplyError(f"scrape entry of {h.hex()} is not a dictionary")
        counts = [entry.get(k, 0 if k == b"downloaded" else None) for k in (b"complete", b"incomplete", b"downloaded")]
        if not all(isinstance(c, int) and 0 <= c <= MAX_COUNT for c in counts):
            raise HttpReplyError(f"scrape entry of {h.hex()} lacks whole counts")
        if key == h or h not in out:  # an entry under the raw key wins
            out[h] = ScrapeCounts(*cast(list[int], counts))  # each an int: checked just above
    return out
