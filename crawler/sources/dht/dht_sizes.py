"""Sizes of swarms only the DHT reports: a visit's BEP 33 scrape, started where its lookup ended.

A tracker's reply says how many seeders and leechers it holds; a torrent
only the DHT knows has no such figure, so its coverage (counted against
reported, ``crawler.queue.coverage``) would be unknown. When a visit's
trackers gave no counts and its DHT lookup found peers, the worker asks the
nodes nearest the info-hash for their seed and peer bloom filters
(``dht_scrape``) and keeps the estimates as the torrent's seeders and
leechers, marked as estimates.

Where it starts. The contacts are the nodes the visit's own lookup queried
last (``DhtSource.contacts``): libtorrent's traversal nears the hash as it
goes, so the scrape needs a few hops at most, and never starts from the
bootstrap routers. A libtorrent node fills its filters with peers of the
asker's family only, so each family the node listens on is scraped from its
own socket and the unions of both are estimated together (``dht_bloom``).

Politeness. The nodes count the packets of an address, whoever sends them:
every scrape query is reported to the lookups' pacer (``DhtSource.note_sent``),
so the per-node budget covers both, and the scrape's own spacing to any one
node is an eighth of ``PEERCRAWL_DHT_NODE_RATE`` (0.5 queries/s by default),
so scrapes alone never take a node near its ban. The process's scrapes go
out at most ``OVERALL_RATE`` queries a second; each takes a place in the
namespace's DHT budget, as a lookup does (the caller's).
"""

from __future__ import annotations

import socket as _stdsocket
import time
from dataclasses import dataclass

import gevent

from crawler import logs, spawning
from crawler.settings import Settings
from crawler.sources.addresses import policy
from crawler.sources.dht import dht_bloom
from crawler.sources.dht.dht_scrape import scrape
from crawler.sources.dht.krpc_socket import KrpcSocket

log = logs.get(__name__)

# Queries a second of one process's scrapes, whatever the nodes.
OVERALL_RATE = 50.0
# The scrape's share of a node's rate: the lookups keep the rest.
NODE_SHARE = 1 / 8


@dataclass(frozen=True)
class SwarmSize:
    """A DHT swarm's estimated seeds and other peers (BEP 33), with what it cost."""

    seeders: int
    leechers: int
    queries: int
    saturated: bool


class DhtSizes:
    """The process's DHT scrapes: one socket per family the DHT node listens on (module note).

    ``dht``: the process's ``DhtSource`` (its contacts and pacer); ``requests``: its
    ``RequestCounts`` (scrapes and their queries counted), or None.
    """

    def __init__(self, settings: Settings, dht, requests=None):
        self.settings, self.dht, self.requests = settings, dht, requests
        self.check = policy(settings.allow_private)
        self.sockets: dict[int, KrpcSocket] = {}
        for ip, _ in dht.listen:
            family = _stdsocket.AF_INET6 if ":" in ip else _stdsocket.AF_INET
            if family in self.sockets:
                continue
            sock = KrpcSocket(bind=(ip, 0), node_rate=settings.dht_node_rate * NODE_SHARE,
                              overall_rate=OVERALL_RATE)
            sock.on_sent = self._sent
            self.sockets[family] = sock

    def _sent(self, address: tuple) -> None:
        self.dht.note_sent(address[0])

    def size(self, info_hash_hex: str) -> SwarmSize | None:
        """The swarm's estimated size from the nodes the latest lookup of ``info_hash_hex`` queried, or
        None when no node answered with filters (nothing is then known)."""
        contacts = self.dht.contacts(info_hash_hex)
        by_family = {family: [c for c in contacts if (":" in c[0]) == (family == _stdsocket.AF_INET6)]
                     for family in self.sockets}
        deadline = time.monotonic() + self.settings.dht_scrape_timeout
        jobs = [spawning.spawn(scrape, self.sockets[f], info_hash_hex, cs, deadline, check=self.check)
                for f, cs in by_family.items() if cs]
        gevent.joinall(jobs)
        results = [j.get() for j in jobs if j.successful()]  # a successful one has its value
        queries = sum(r.queries for r in results)
        if self.requests is not None and jobs:
            self.requests.dht_scrape(queries)
        found = [r for r in results if r.ok and r.filters]
        if not found:
            return None
        seeds = dht_bloom.union(r.seeds_filter for r in found)
        peers = dht_bloom.union(r.peers_filter for r in found)
        return SwarmSize(round(dht_bloom.estimate(seeds)), round(dht_bloom.estimate(peers)), queries,
                         dht_bloom.saturated(seeds) or dht_bloom.saturated(peers))

    def close(self) -> None:
        """Close the sockets (waiting scrapes end as their queries time out)."""
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()
