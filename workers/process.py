"""Assembling one worker process from settings: sources, recorder, flusher, pool.

``Process`` is what the ``worker`` and ``run`` commands build after gevent is
patched; tests and the benchmark build it too, with settings of their own
(``settings.replace(...)``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from gevent.event import Event

from crawler import logs, spawning
from crawler.counters.batcher import Batcher
from crawler.counters.recorder import Recorder
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.observer import QUIET
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.sources.trackers.trackers import Trackers
from crawler.stathat.flusher import Flusher
from crawler.store import patience
from crawler.store.outage import Once, Outage
from crawler.store.store import Store
from workers.autoscale import Autoscaler
from workers.heartbeat import Heartbeat
from workers.visit import Visit, Visitor
from workers.worker import Worker

log = logs.get("worker")

# The collector's first generation: CPython's 700 allocations ran it ~500 times
# in a bench_worker run (--quick), to collect ~2,000 objects in all: a
# worker's garbage is almost never cyclic, and those collections cost 10-20 %
# of its CPU (docs/worker.md, "Where a visit's CPU goes"). At 10,000 the
# second generation's collections (every tenth) were still a third of what
# collecting cost (bench_visit_cost: 4 in a 10,000-visit first pass); at
# 50,000 one, and collecting ~0.5x the CPU (bench/results, "new addresses").
GC_FIRST_GENERATION = 50_000


def tune_gc() -> None:
    """Collect less often in a worker process: a larger first generation, and the heap built at
    start (modules, settings, scripts) frozen out of every later collection, the collector on
    again if the start-up ran without it (``crawler.cli.main``). For the commands that run a
    worker (and the benchmark, as they do); call once, after the ``Process`` is built.

    Frozen without a collection first: what a start-up leaves unreachable is ~800 objects of
    classes built and replaced while modules load (no file, no socket), which stay; a collection
    of the whole heap to find them is ~5 % of a start-up."""
    gc.freeze()
    gc.set_threshold(GC_FIRST_GENERATION, *gc.get_threshold()[1:])
    gc.enable()


class Process:
    """Everything one worker process owns; ``run()`` runs the pool and closes the sources.

    Every bound comes from ``settings``. The other parameters are the
    command's flags: ``concurrency`` (a pool size, or None for
    ``--concurrency auto``), ``max_visits``, ``until_idle``, ``duration``;
    ``on_visit`` (``run``'s progress). Hooks for which no setting exists:
    ``flush=False`` runs no flusher and no sweep (tests that count the outbox
    themselves); ``autoscale_interval`` and ``autoscale_options`` (the
    ``Autoscaler``'s pace and targets, tuned by the benchmark; a deployment has
    no reason to change them).
    Raises ``GeoError`` (database), ``StoreError`` (Redis) or
    ``AddressRefused`` (a private DHT router without allow_private) at build.
    """

    def __init__(self, settings: Settings, client, keys: Keys, *, concurrency: int | None,
                 max_visits: int | None = None, until_idle: bool = False, duration: float | None = None,
                 on_visit: Callable[[Visit], None] | None = None, flush: bool = True,
                 autoscale_interval: float = 5.0, autoscale_options: dict | None = None):
        self.settings, self.client, self.keys = settings, client, keys
        # The one record of Redis outages every loop of this process reports to.
        self.outage = patience.outage(client) or Outage(patience=settings.redis_wait_seconds)
        # The visits' script calls share round trips (crawler.store.coalesce):
        # the rooms that run scripts are handed this store, not the bare client.
        self.store = Store.coalesced(client)
        # Whoever watches this process: its /metrics when it serves them, else nobody.
        self.metrics = self._metrics_server = None
        if settings.metrics_port is not None:
            from workers.worker_metrics import WorkerMetrics

            self.metrics = WorkerMetrics(settings.top_trackers, always=(t.url for t in settings.trackers))
        observer = self.metrics or QUIET
        self.queue = Queue(self.store, keys, settings, observer)
        self.recorder = Recorder(self.store, keys, settings)
        self.trackers = Trackers(settings, client, keys, observer=observer)
        # What the crawl costs the sources, per minute in Redis: the trackers' requests (counted by
        # Trackers, which writes them at close), the DHT's lookups and the pairs each visit counted.
        self.requests = self.trackers.requests
        on_visit = _both(on_visit, self.requests.visited)
        self.dht = None
        if settings.dht:
            from crawler.sources.dht.dht import DhtSource

            self.dht = DhtSource(settings, requests=self.requests, observer=observer)
        self.sizes = None
        if self.dht is not None and settings.dht_scrape:
            from crawler.sources.dht.dht_sizes import DhtSizes

            self.sizes = DhtSizes(settings, self.dht, self.requests)
        self.names = None
        if settings.metadata:  # the one part that connects to peers (docs/metadata.md)
            from crawler.queue.torrent_metadata import TorrentMetadata
            from crawler.sources.metadata.metadata_fetch import MetadataFetcher
            from crawler.sources.rate_budget import RateBudget
            from workers.metadata_names import MetadataNames

            self.names = MetadataNames(settings, MetadataFetcher(settings), TorrentMetadata(client, keys),
                                       RateBudget.metadata(client, keys, settings))
        self.discovery = None
        if settings.discovery and self.dht is not None:
            from crawler.sources.dht.discovery import Discovery

            self.discovery = Discovery(self.dht, self.queue, client, keys, settings)
        # The visits' recordings are made together (crawler.counters.batcher).
        self.batcher = Batcher(self.recorder, observer=observer)
        self.visitor = Visitor(self.queue, keys, settings, self.trackers, self.batcher, self.dht, outage=self.outage,
                               sizes=self.sizes, names=self.names, observer=observer)
        autoscaler = None
        if concurrency is None:
            autoscaler = Autoscaler(client, settings.concurrency_min, settings.concurrency_max,
                                    interval=autoscale_interval, **(autoscale_options or {}))
        flusher = Flusher(self.store, keys, settings, tracked=QueueView(client, keys).tracked) if flush else None
        if self.metrics is not None:
            on_visit = _both(on_visit, self.metrics.visit)
        self.worker = Worker(
            self.queue, self.visitor, concurrency=concurrency, autoscaler=autoscaler, max_visits=max_visits,
            until_idle=until_idle, duration=duration, flusher=flusher,
            sweep=self.recorder.sweep if flush else None,
            heartbeat=Heartbeat(client, keys),
            on_visit=on_visit, outage=self.outage,
        )
        if self.metrics is not None:
            from workers.worker_metrics import serve

            self.metrics.watch_pool(self.worker.slots)
            assert settings.metrics_port is not None  # the metrics are made only to be served on it
            self._metrics_server = serve(self.metrics, settings.metrics_port)

    def run(self, signals: bool = True) -> int:
        """Run until a stop condition or signal; returns the exit code (0)."""
        if signals:
            self.worker.install_signals()
        stop, sampling = Event(), None
        if self.discovery is not None:
            sampling = spawning.spawn(self.discovery.run, stop)
        try:
            return self.worker.run()
        finally:
            if sampling is not None:
                stop.set()  # it adds what it holds, then ends
                sampling.join(timeout=3.0)
                sampling.kill(block=True, timeout=1.0)
            self.close()

    def close(self) -> None:
        """Close the sources and the metrics server (a Redis error at exit is logged, not raised)."""
        if self.names is not None:
            self.names.close()
        if self.sizes is not None:
            self.sizes.close()
        if self.dht is not None:  # first: its last lookups are counted in what the trackers' close writes
            self.dht.close()
        try:
            with Once():  # at exit a Redis that is away is not waited for (SIGTERM's 25 s)
                self.trackers.close()
        except (StoreError, OSError) as e:  # Redis gone at exit: health counts are best effort
            log.warning("trackers_close_failed", error=str(e))
        if self._metrics_server is not None:
            self._metrics_server.stop(timeout=1)


def _both(first, second):
    """One ``on_visit`` calling ``first`` (if any), then ``second``."""
    if first is None:
        return second

    def both(v):
        first(v)
        second(v)

    return both
