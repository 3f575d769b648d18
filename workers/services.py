"""The service greenlets around a worker's claim loop: heartbeat, lease extender, trim, autoscaler, flusher.

Each runs a loop of its own until ``stop``: the heartbeat publishes the
worker's figures for ``status`` (and notices a supervisor gone); the
extender pushes every in-flight lease forward every third of the lease
time; the trim drops old per-minute visit counts hourly; with
``--concurrency auto`` the pool-size controller decides from a ``Sample``;
the StatHat flusher posts the outbox and sweeps stale dedupe marks. A
Redis error of a service is reported to the process's ``Outage`` (one line
per outage) and the loop goes on.
"""

from __future__ import annotations

from collections.abc import Callable

import gevent
from gevent.event import Event

from crawler import logs, spawning
from crawler.errors import StoreError
from crawler.queue.queue import Queue
from crawler.store.outage import Outage
from workers.autoscale import Sample
from workers.heartbeat import Heartbeat
from workers.slots import Slots

log = logs.get("worker")

# How often a worker drops old per-minute visit counts (Queue.trim_visit_buckets).
TRIM_SECONDS = 3600.0


class Services:
    """A worker's services (module note).

    ``figures()``: what the heartbeat publishes; ``sample()``: what the
    autoscaler decides from; ``orphaned()``: called once the supervisor is
    gone (the worker drains as on SIGTERM); ``resized()``: the pool's target
    changed (the claim loop looks again); ``draining``: set while the pool
    drains (the autoscaler then holds its size). ``flusher`` and ``sweep``:
    the StatHat flusher and the mark sweep it runs (None: none).
    """

    def __init__(self, queue: Queue, slots: Slots, heartbeat: Heartbeat, outage: Outage, *,
                 figures: Callable[[], dict], sample: Callable[[], Sample], orphaned: Callable[[], None],
                 resized: Callable[[], None], draining: Event, autoscaler=None, flusher=None,
                 sweep: Callable | None = None, shutdown_margin: float):
        self.queue, self.slots, self.heartbeat, self.outage = queue, slots, heartbeat, outage
        self.figures, self.sample, self.orphaned, self.resized = figures, sample, orphaned, resized
        self.draining, self.autoscaler, self.flusher, self.sweep = draining, autoscaler, flusher, sweep
        self.shutdown_margin = shutdown_margin
        self._greenlets: list[gevent.Greenlet] = []
        self._flushing: gevent.Greenlet | None = None  # the flusher's greenlet, one of _greenlets
        self._stop = Event()  # every service ends its loop

    def beat(self) -> None:
        """Publish the figures now (the heartbeat's step; also when the network's state changes)."""
        if self.heartbeat.orphaned():
            self.orphaned()
        try:
            self.heartbeat.beat(self.figures())
        except StoreError as e:
            if not self.outage.failed(e, "heartbeat"):
                log.warning("heartbeat_failed", error=str(e))
            return
        self.outage.ok()

    def _every(self, seconds: float | Callable[[], float], fn: Callable[[], None]) -> None:
        """``fn()`` every ``seconds`` (or ``seconds()``, asked before each wait) until the stop."""
        while not self._stop.wait(seconds() if callable(seconds) else seconds):
            try:
                fn()
            except StoreError as e:
                # A success ends the outage through the client's own calls (Outage.run),
                # not here: a service may swallow its Redis error and return.
                if not self.outage.failed(e, getattr(fn, "__name__", "?").lstrip("_")):
                    log.warning("service_failed", service=getattr(fn, "__name__", "?"), error=str(e))

    def _extend(self) -> None:
        held = self.slots.held
        for g, lease in list(held.items()):
            # A runner may have completed the lease since the snapshot (each
            # extend is a round trip), or be reading the reply of the round
            # trip that completed it: only a lease still held a moment after
            # the failed extend counts as lost.
            if held.get(g) is lease and not self.queue.extend(lease):
                gevent.sleep(0.05)
                if held.get(g) is lease:
                    log.warning("lease_lost", info_hash=lease.info_hash)

    def _autoscale(self) -> None:
        if not self.draining.is_set():  # a draining pool says nothing about the right size
            self.slots.target = self.autoscaler.step(self.sample())
            self.resized()  # the claim loop starts the new runners now

    def start(self) -> None:
        """Beat once, then start every service."""
        self.beat()

        def spawn(fn, *args) -> gevent.Greenlet:
            g = spawning.spawn(fn, *args)
            self._greenlets.append(g)
            return g

        spawn(self._every, self.heartbeat.interval, self.beat)
        spawn(self._every, max(self.queue.settings.lease_seconds / 3, 0.5), self._extend)
        spawn(self._every, TRIM_SECONDS, self.queue.trim_visit_buckets)
        if self.autoscaler is not None:
            spawn(self._every, self.autoscaler.wait, self._autoscale)
            spawn(self.autoscaler.probe, lambda: self.slots.running, self._stop)
        if self.flusher is not None:
            self._flushing = spawn(self.flusher.run_forever, self._stop, self.sweep)

    def stop(self) -> None:
        """Tell every service to end; the flusher gets time for its last flush, the rest are killed."""
        self._stop.set()
        if self._flushing is not None:
            self._flushing.join(timeout=self.shutdown_margin - 2.0)
        gevent.killall(self._greenlets, block=True, timeout=1.0)
        if self.autoscaler is not None:
            self.autoscaler.close()
