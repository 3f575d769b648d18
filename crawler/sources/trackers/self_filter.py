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
(6881) would drop them all: the README says to leave it at 0. ``shared_port`` is
that port, chosen once per namespace.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from operator import itemgetter

import redis

from crawler.errors import StoreError
from crawler.keys import Keys

# The range of the shared port announced when Settings.announce_port is 0: above the ports real
# clients commonly use (6881-6999, 51413) and the ephemeral range's start.
RANDOM_PORT_RANGE = (49152, 65535)
_PORT = itemgetter(1)  # an entry's port


def shared_port(client: redis.Redis, keys: Keys) -> int:
    """The namespace's announce port: chosen at random by the first worker (SET NX), read by all."""
    try:
        client.set(keys.announce_port, random.randint(*RANDOM_PORT_RANGE), nx=True)
        port = client.get(keys.announce_port)
        assert port is not None  # set just above, by this call or whoever set it first
        return int(port)
    except redis.RedisError as e:
        raise StoreError(f"cannot read the announce port: {e}") from e


class SelfFilter:
    """Drops the entries on the namespace's announce port (see the module note)."""
    def __init__(self, port: int):
        self.port = port

    def strip(self, peers: Sequence[tuple]) -> tuple[Sequence[tuple], bool]:
        """(peers without the crawler's entries, whether any was listed). ``peers``: (ip, port) pairs,
        the ip as text or packed; returned as given when none is ours (most lists: one C loop)."""
        port = self.port
        if port not in map(_PORT, peers):
            return peers, False
        return [p for p in peers if p[1] != port], True
