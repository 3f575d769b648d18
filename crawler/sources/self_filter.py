"""Recognise the crawler's own entries in trackers' peer lists (contract §3).

Every entry on the namespace's announce port is the crawler's: its own
(trackers list the announcer, at an address it may not know behind NAT) or
one left by another worker of the namespace, on this machine or another,
killed between its announce and its withdrawal. Such leftovers stay listed
until the tracker forgets them, at addresses this process has never seen, so
no rule that learns "our" addresses can tell them from peers; the port can.

The cost is a real peer that happens to listen on the same port: with the
default random port in 49152-65535 about one peer in 16,000 of those using
that range, far below the error a leftover adds (one IP per torrent it is
listed in). ``PEERCRAWL_ANNOUNCE_PORT`` set to a port real clients use
(6881) would drop them all: the README says to leave it at 0.
"""

from __future__ import annotations

from crawler.sources.peers import Peer


class SelfFilter:
    """Drops the entries on the namespace's announce port (see the module note)."""
    def __init__(self, port: int):
        self.port = port

    def strip(self, peers) -> tuple[list[Peer], bool]:
        """(peers without the crawler's entries, whether any was listed)."""
        port = self.port
        kept = [p for p in peers if p[1] != port]
        return kept, len(kept) != len(peers)
