"""What one visit learned from its sources, in the shape scoring (§2) needs.

A source that failed is ``ok=False`` with an ``error``; it never reads as
"answered with 0 peers".
"""

from __future__ import annotations

import itertools
from collections.abc import Set
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from crawler.counters.ip_forms import PackedIPs
from crawler.sources.compact_peers import CompactPeers

_IP = itemgetter(0)  # a peer's IP text


class SourceResult(NamedTuple):
    """The outcome of asking one source (a tracker URL, or ``"dht"``). A named tuple, not a frozen
    dataclass: a visit makes one or more, and a frozen dataclass of these fields took nearly three
    times as long to make."""

    source: str
    ok: bool
    # (ip, port) pairs, ip as the canonical text form (ipaddress's str()); a frozenset, or a UDP
    # tracker's ``CompactPeers`` (the same set, its addresses kept packed).
    peers: Set[tuple[str, int]] = frozenset()
    # The most peers this source hands out per request (its "max").
    max_peers: int = 0
    seeders: int | None = None
    leechers: int | None = None
    # The tracker's interval / min interval, in seconds, where it gave them.
    interval: float | None = None
    min_interval: float | None = None
    error: str | None = None
    warning: str | None = None
    # Entries the source returned, the crawler's own included (trackers list
    # the announcer); None: len(peers). A tracker that filled its numwant is
    # full even though one of the entries was us.
    returned: int | None = None
    # The failure was the tracker's error reply (a refusal: alive, never backs off).
    refused: bool = False
    # Not asked: the address policy refuses where its host resolves (contract §3).
    blocked: bool = False
    # How the source was asked: "announce", "scrape" (it reported the swarm
    # empty, so it was not announced to: no peers from it), or "backoff" (not
    # asked: the tracker backs off, a failure of this visit).
    asked: str = "announce"

    @property
    def full(self) -> bool:
        """Returned at least its max peers (contract §2)."""
        n = len(self.peers) if self.returned is None else max(self.returned, len(self.peers))
        return self.ok and self.max_peers > 0 and n >= self.max_peers

    @classmethod
    def failed(cls, source: str, error: str, max_peers: int = 0) -> SourceResult:
        """A source that gave no answer, with why."""
        return cls(source=source, ok=False, max_peers=max_peers, error=error)

    def bounded(self, limit: int) -> SourceResult:
        """This result with at most ``limit`` peers (which ones is arbitrary; the count is what matters)."""
        if len(self.peers) <= limit:
            return self
        if isinstance(self.peers, CompactPeers):
            return self._replace(peers=CompactPeers(itertools.islice(self.peers.pairs, max(0, limit))))
        return self._replace(peers=frozenset(itertools.islice(self.peers, max(0, limit))))


@dataclass(frozen=True)
class VisitResult:
    """Every source's result for one torrent's visit."""

    info_hash: str
    sources: tuple[SourceResult, ...] = field(default_factory=tuple)

    @property
    def answered(self) -> bool:
        """Some source answered (else the visit failed, contract §1)."""
        return any(s.ok for s in self.sources)

    @property
    def peer_ips(self) -> frozenset[str]:
        """Distinct peer IPs from every source that answered."""
        return frozenset(map(_IP, itertools.chain.from_iterable(s.peers for s in self.sources if s.ok)))

    @property
    def distinct_ips(self) -> PackedIPs | frozenset[str]:
        """``peer_ips`` as the recorder takes them: packed when every source that answered with peers
        gave them packed (``CompactPeers``: no text made), else their texts."""
        given = [s.peers for s in self.sources if s.ok and s.peers]
        packed = [p for p in given if isinstance(p, CompactPeers)]
        if len(packed) < len(given):
            return self.peer_ips
        if len(packed) == 1:
            return packed[0].ips()
        return PackedIPs(itertools.chain.from_iterable(p.ips() for p in packed))

    @property
    def seeders(self) -> int | None:
        """The largest seeder count any answering source gave, or None."""
        vals = [s.seeders for s in self.sources if s.ok and s.seeders is not None]
        return max(vals) if vals else None

    @property
    def leechers(self) -> int | None:
        """The largest leecher count any answering source gave, or None."""
        vals = [s.leechers for s in self.sources if s.ok and s.leechers is not None]
        return max(vals) if vals else None

    @property
    def reported(self) -> int | None:
        """The swarm size the sources report: the largest seeders + leechers one answering source
        gave (a source giving one of them counts it alone), or None when none gave either."""
        vals = [(s.seeders or 0) + (s.leechers or 0) for s in self.sources
                if s.ok and (s.seeders is not None or s.leechers is not None)]
        return max(vals) if vals else None
