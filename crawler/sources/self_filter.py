"""Recognise the crawler's own entry in trackers' peer lists (SPEC §3).

Trackers see the crawler at its public address, which it may not know (NAT),
and at the port it announced. Until that address is known, every entry on our
announce port is ours. An address seen on our port in the replies for
``LEARN_AFTER`` different torrents is learned as ours; from then on only
learned addresses on our port are dropped, so a real peer that happens to use
the same port elsewhere is kept. (A real peer on our random port in several of
the same torrents would be learned too: one address lost of millions.)

Memory is bounded whatever the trackers list: candidates are cleared past
``_MAX_CANDIDATES``, and learned addresses are an ``Lru`` of ``_MAX_OWN``
(a crawler has a handful of public addresses; a hostile tracker listing
thousands on our port only evicts its own inventions).
"""

from __future__ import annotations

from crawler.sources.lru import Lru
from crawler.sources.peers import Peer

LEARN_AFTER = 2
# Bounded memory: candidate addresses seen on our port, with the torrents.
_MAX_CANDIDATES = 1024
# Bounded memory: addresses learned as ours (NAT, several interfaces, IPv6).
_MAX_OWN = 256


class SelfFilter:
    def __init__(self, port: int):
        self.port = port
        self.own: Lru[str, bool] = Lru(_MAX_OWN)
        self._seen: dict[str, set[bytes]] = {}

    def strip(self, peers, info_hash: bytes) -> tuple[list[Peer], bool]:
        """(peers without our own entry, whether our entry was listed)."""
        kept: list[Peer] = []
        found = False
        for ip, port in peers:
            if port != self.port:
                kept.append((ip, port))
                continue
            self._learn(ip, info_hash)
            if not len(self.own) or self.own.get(ip):
                found = True
            else:
                kept.append((ip, port))
        return kept, found

    def _learn(self, ip: str, info_hash: bytes) -> None:
        if ip in self.own:
            return
        seen = self._seen.get(ip)
        if seen is None:
            if len(self._seen) >= _MAX_CANDIDATES:
                self._seen.clear()
            seen = self._seen[ip] = set()
        seen.add(info_hash)
        if len(seen) >= LEARN_AFTER:
            self.own[ip] = True
            del self._seen[ip]
