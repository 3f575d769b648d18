"""Discovery: info-hashes sampled from the DHT into the discovered lane (contract §3; backfeed: the DHT's own hashes fed back into the queue).

With ``PEERCRAWL_DISCOVERY=on`` each worker's DHT node asks other nodes for
a sample of the info-hashes they store (BEP 51 ``sample_infohashes``,
libtorrent's ``dht_sample_infohashes``) and adds the hashes it had not seen
to the ``discovered`` lane (``crawler.queue.lanes``).

Politeness. A node is asked again only after the ``interval`` its answer
gave (libtorrent's nodes say 6 hours; never sooner than ``MIN_INTERVAL``),
one that did not answer after ``SILENT_RETRY``; the worker sends at most
``PEERCRAWL_DISCOVERY_RATE`` queries a second, each to a random target so the
answers' nodes spread over the keyspace. The nodes to ask come from the
bootstrap list and from the answers (``nodes``), at most ``MAX_NODES``
remembered; addresses the address policy refuses are never asked.

Admission is one atomic step across workers: ``add.lua`` adds a hash that is
neither tracked nor evicted (a tombstone within its period keeps it out) in
the discovered lane, and only there, so two workers sampling the same hash
admit it once (the second sees it tracked). A worker also remembers the
last ``SEEN`` hashes it passed on, so a hash many nodes store costs one add.
No probabilistic filter (a bloom filter of seen hashes) is used: the queue itself
is the set of known hashes, and it has no false positives.

Figures per minute in ``{ns}:disc:<minute>`` (sent once a second): queries sent, hashes sampled,
new to this worker, admitted; ``status`` shows the last minute and this one.
"""

from __future__ import annotations

import heapq
import os
import time

import redis
from gevent.event import Event

from crawler import logs
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.settings import Settings
from crawler.sources.addresses import AddressRefused, policy
from crawler.sources.lru import Lru
from crawler.store.minute_figures import recent
from crawler.torrents.items import NewItem

log = logs.get(__name__)

# A node is not asked again sooner than this, whatever interval it gives.
MIN_INTERVAL = 60.0
# A node that did not answer is asked again after this.
SILENT_RETRY = 600.0
# Nodes remembered to ask (each ~100 bytes).
MAX_NODES = 10_000
# Hashes a worker remembers passing on (~100 bytes each).
SEEN = 200_000
# Hashes added to the queue per add.lua call, and how long new ones may wait for a batch.
ADD_BATCH = 500
ADD_EVERY = 1.0


class Frontier:
    """The nodes to sample and when each may be asked again (pure: no I/O, times given)."""

    def __init__(self, max_nodes: int = MAX_NODES):
        self.max_nodes = max_nodes
        self._due: dict[tuple[str, int], float] = {}
        self._heap: list[tuple[float, tuple[str, int]]] = []

    def __len__(self) -> int:
        return len(self._due)

    def add(self, endpoint: tuple[str, int], now: float) -> None:
        """A node heard of: asked when its turn comes (never re-dated if known)."""
        if endpoint not in self._due and len(self._due) < self.max_nodes:
            self._set(endpoint, now)

    def next(self, now: float) -> tuple[str, int] | None:
        """A node whose time has come (the earliest), marked as asked; None if none."""
        while self._heap:
            at, ep = self._heap[0]
            if self._due.get(ep) != at:  # re-dated since
                heapq.heappop(self._heap)
                continue
            if at > now:
                return None
            heapq.heappop(self._heap)
            self._set(ep, now + SILENT_RETRY)
            return ep
        return None

    def answered(self, endpoint: tuple[str, int], interval: float, now: float) -> None:
        """``endpoint`` answered with ``interval``: not asked again before it has passed."""
        self._set(endpoint, now + max(interval, MIN_INTERVAL))

    def _set(self, endpoint: tuple[str, int], at: float) -> None:
        self._due[endpoint] = at
        heapq.heappush(self._heap, (at, endpoint))
        if len(self._heap) > 4 * self.max_nodes:  # drop re-dated entries
            self._heap = [(t, e) for e, t in self._due.items()]
            heapq.heapify(self._heap)


class Discovery:
    """Samples the DHT through ``dht`` (a ``DhtSource``) and admits new hashes (module note)."""

    def __init__(self, dht, queue: Queue, client: redis.Redis, keys: Keys, settings: Settings):
        self.dht, self.queue, self.client, self.keys = dht, queue, client, keys
        self.every = 1.0 / settings.discovery_rate
        self.check = policy(settings.allow_private)
        self.frontier = Frontier()
        self.seen: Lru[str, bool] = Lru(SEEN)
        self.pending: list[str] = []
        self.figures = {"queries": 0, "sampled": 0, "new": 0, "admitted": 0}  # this process's, for tests
        self._unsent = dict.fromkeys(self.figures, 0)  # counted, not yet in Redis
        now = time.monotonic()
        for ep in dht.bootstrap:
            self._heard(ep, now)

    def _heard(self, endpoint: tuple[str, int], now: float) -> None:
        try:
            self.check(endpoint[0], "DHT node")
        except AddressRefused:
            return
        self.frontier.add(endpoint, now)

    def run(self, stop: Event) -> None:
        """Sample and admit until ``stop`` is set; a Redis failure is logged and retried."""
        last_add = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            ep = self.frontier.next(now)
            if ep is not None:
                self.dht.sample(ep, os.urandom(20))
                self._count(queries=1)
            self.dht.sampled.wait(self.every)
            self._take(time.monotonic())
            if time.monotonic() - last_add >= ADD_EVERY or len(self.pending) >= ADD_BATCH:
                try:
                    self.admit()
                except StoreError as e:
                    log.warning("discovery_admit_failed", error=str(e), waiting=len(self.pending))
                    stop.wait(1.0)
                self._send_figures()
                last_add = time.monotonic()
            # the rate cap: at most one query per `every`
            stop.wait(max(0.0, self.every - (time.monotonic() - now)))
        try:
            self.admit()
        except StoreError:
            pass
        self._send_figures()

    def _take(self, now: float) -> None:
        """Every answer received: the node's interval, its nodes, its hashes (new ones pending)."""
        answers, self.dht.samples = self.dht.samples, []
        self.dht.sampled.clear()
        for endpoint, interval, hashes, nodes in answers:
            self.frontier.answered(endpoint, interval, now)
            for n in nodes:
                self._heard(n, now)
            new = [h for h in hashes if h not in self.seen]
            for h in new:
                self.seen[h] = True
            self.pending += new
            self._count(sampled=len(hashes), new=len(new))

    def admit(self) -> int:
        """Add the pending hashes to the discovered lane (tracked and evicted ones stay as they are);
        returns how many were admitted. Raises ``StoreError`` (they stay pending)."""
        admitted = 0
        while self.pending:
            batch = self.pending[:ADD_BATCH]
            statuses = self.queue.add([NewItem(h) for h in batch], lane="discovered", move=False)
            del self.pending[:len(batch)]
            n = sum(1 for s in statuses if s == "added")
            admitted += n
            self._count(admitted=n)
        return admitted

    def _count(self, **figures: int) -> None:
        for name, n in figures.items():
            self.figures[name] += n
            self._unsent[name] += n

    def _send_figures(self) -> None:
        """The figures counted since the last send, into this minute's hash (one round trip a second
        at most, whatever the query rate); kept for the next send if Redis fails."""
        unsent = {name: n for name, n in self._unsent.items() if n}
        if not unsent:
            return
        key = self.keys.discovery_minute(int(time.time()) // 60)
        try:
            with self.client.pipeline(transaction=False) as p:
                for name, n in unsent.items():
                    p.hincrby(key, name, n)
                p.expire(key, 600)
                p.execute()
        except redis.RedisError as e:
            log.warning("discovery_figures_failed", error=str(e))
            return
        for name, n in unsent.items():
            self._unsent[name] -= n


def discovery_report(client: redis.Redis, keys: Keys, settings: Settings, now: float) -> dict | None:
    """``status``'s discovery figures: per minute over the last minute and this one; None when off."""
    if not settings.discovery:
        return None
    totals, seconds = recent(client, keys.discovery_minute, now, "the discovery figures")
    out = {"window_s": round(seconds, 1)}
    for name in ("queries", "sampled", "new", "admitted"):
        out[f"{name}_per_minute"] = round(totals.get(name, 0) * 60 / seconds, 1)
    return out
