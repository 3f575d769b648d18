"""What DHT lookups wait on: the traversals of an info-hash and each greenlet's lookup.

``DhtSource`` (see the strategy note in ``dht``) keeps a ``Target`` per
info-hash with a traversal the pacer has not retired, and a ``Lookup`` per
greenlet waiting on one. Both are mutated only by the hub's alert dispatcher
and by lookups starting and ending.
"""

from __future__ import annotations

import ipaddress
from collections import deque

from gevent.event import Event

from crawler.sources.dht.dht_pacing import Group

# Endpoints each info-hash's traversals keep (``Target.queried``): a DHT scrape's contacts.
CONTACTS = 16


class Target(Group):
    """Every traversal of one info-hash not yet retired by the pacer.

    ``lookups``: the lookups whose greenlet still waits (usually one);
    ``queries``: get_peers queries sent for the hash so far. The pacer's
    part (``Group``) counts the traversals and the addresses they queried.
    """

    __slots__ = ("key", "lookups", "queried", "queries")

    def __init__(self, key: bytes, now: float):
        super().__init__(now)
        self.key = key
        self.lookups: list[Lookup] = []
        self.queries = 0
        # The endpoints queried last: a traversal asks nearer nodes as it goes.
        self.queried: deque[tuple[str, int]] = deque(maxlen=CONTACTS)


class Lookup:
    """One greenlet's lookup: the peers gathered, and the event it sleeps on."""

    __slots__ = ("deadline", "event", "max_peers", "peers", "queries_before", "target")

    def __init__(self, target: Target, max_peers: int, deadline: float):
        self.target = target
        self.peers: set[tuple[str, int]] = set()
        self.event = Event()
        self.max_peers = max_peers
        self.deadline = deadline
        self.queries_before = target.queries


def gather_peers(alert, live: list[Lookup]) -> None:
    """A ``dht_get_peers_reply_alert``'s peers into each waiting lookup of its hash; runs in the hub.

    Wakes a lookup only once it has enough peers; settle and deadline are the ticker's."""
    peers = None
    for lk in live:
        found = lk.peers
        if len(found) >= lk.max_peers:
            continue
        if peers is None:
            peers = alert.peers()
            # Port 0 is nobody, as in trackers' lists (peers.parse_compact).
            if any(":" in ip or not port for ip, port in peers):
                peers = [(str(ipaddress.ip_address(ip)) if ":" in ip else ip, port) for ip, port in peers if port]
        found.update(peers)
        if len(found) >= lk.max_peers:
            lk.event.set()
