"""What a torrent's visits learned about its sources: kept for its next visit and shown by ``torrent``.

One HASH per torrent (``keys.tracker_min_interval``), written once by each
visit that asked a source (``note.lua``, ``VisitPlan.note``), read by the
next visit's plan (``plan.lua``) and by ``torrent``. It expires on its own
``ttl`` after its last write: a torrent nobody visits leaves nothing behind.

- ``<tracker URL>``: unix time before which the tracker is not announced to
  again (its ``min interval``);
- ``dht``: unix time before which the DHT is not looked up again, and
  ``dht:empty``: its lookups in a row that found nobody (the widening
  schedule of ``crawler.sources.dht.dht_schedule``);
- ``last``: the last visit's sources, ``<crc32 of the visit's tracker list,
  8 hex>:<one code per tracker, in that order>|<the DHT's code>``. Codes, not
  URLs, so the value stays under Redis's 64-byte listpack bound for up to
  50 trackers and the hash stays small; ``torrent`` names them again from
  the torrent's tracker list, whose checksum must match (a list drawn from a
  set larger than the per-torrent bound, or default trackers changed since,
  do not: then the codes are shown in order, unnamed).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

DHT, DHT_EMPTY, LAST = "dht", "dht:empty", "last"
# One code per source of the last visit (torrent --json spells them out).
TRACKER_CODES = {
    "a": "announced",
    "s": "scraped: empty swarm, not announced",
    "r": "refused",
    "p": "refused by the address policy (a private or local address)",
    "f": "failed",
    "b": "skipped: backing off",
    "h": "skipped: inside its min interval",
    "d": "skipped: another URL of the same tracker (one host, port and path) was asked",
    "m": "skipped: a tracker learned to list the same peers was asked, its scrape agreeing",
}
DHT_CODES = {
    "a": "looked up",
    "f": "failed",
    "k": "skipped: found nobody on its last lookups (widening schedule)",
    "-": "not asked: the DHT is off",
}


@dataclass(frozen=True)
class SourceNotes:
    """A torrent's notes as its next visit reads them."""

    # tracker URL -> unix time before which it is not announced to
    not_before: dict[str, float] = field(default_factory=dict)
    dht_not_before: float = 0.0
    dht_empty: int = 0
    last: str | None = None


def decode(flat: dict[str, str]) -> SourceNotes:
    """The notes of a HGETALL (field -> value, decoded)."""
    trackers = {k: float(v) for k, v in flat.items() if k not in (DHT, DHT_EMPTY, LAST)}
    return SourceNotes(trackers, float(flat.get(DHT, 0.0)), int(float(flat.get(DHT_EMPTY, 0))), flat.get(LAST))


def tracker_list(defaults: tuple[str, ...], own: list[str]) -> list[str]:
    """The trackers a visit asks, in the order its notes keep them: the defaults, then its own, sorted."""
    return list(dict.fromkeys(defaults + tuple(sorted(own))))


def _checksum(urls: list[str]) -> str:
    return f"{zlib.crc32(chr(10).join(urls).encode()):08x}"


def last(urls: list[str], codes: dict[str, str], dht: str) -> str:
    """The ``last`` field of a visit: ``codes`` (tracker URL -> code; a URL of ``urls`` left out was
    held by its min interval) and the DHT's code."""
    return f"{_checksum(urls)}:{''.join(codes.get(u, 'h') for u in urls)}|{dht}"


def read_last(value: str | None, urls: list[str]) -> dict | None:
    """``last`` spelled out for ``torrent``: {"trackers": {url: what}, "dht": what}, or with the codes
    in order and unnamed when ``urls`` is not the visit's tracker list. None when never noted."""
    if not value or ":" not in value or "|" not in value:
        return None
    check, _, rest = value.partition(":")
    codes, _, dht = rest.partition("|")
    out: dict = {"dht": DHT_CODES.get(dht, dht)}
    if check == _checksum(urls) and len(codes) == len(urls):
        out["trackers"] = {u: TRACKER_CODES.get(c, c) for u, c in zip(urls, codes)}
    else:
        out["trackers_unnamed"] = [TRACKER_CODES.get(c, c) for c in codes]
    return out
