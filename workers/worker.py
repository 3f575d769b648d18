"""The worker process: a pool of greenlets over the score queue (contract §1, §7).

Strategy. Runner greenlets (``workers.runners``) each visit a batch of
torrents together and, as they complete it, claim the next ones with the
other runners completing then (``workers.claims``: one claim for all of
them), so a busy pool costs no claim of its own per visit. One loop fills
the free slots: it claims as many torrents as there are free slots (one
``claim`` round trip) and starts runners for them, waiting with a growing
pause while nothing is ready. Who holds which lease and who may claim next
is counted in one place, ``Slots`` (``workers/slots.py``). Around the loop
run the service greenlets of ``workers.services`` (heartbeat, lease
extender, StatHat flusher, and with ``--concurrency auto`` the pool-size
controller, which decides from ``Worker.sample``).

Stopping. ``--max-visits`` stops claiming after that many claims,
``--duration`` after that many seconds, ``--until-idle`` once nothing is
ready or in flight anywhere (cooling torrents do not count); each then lets
the running visits finish. SIGTERM or SIGINT stops claiming at once, waits
for running visits until ``shutdown_seconds`` minus a margin (a second
SIGINT: not at all), kills the rest and hands their torrents back
(``Queue.release``), stops every service (the flusher posting to StatHat
once more) and leaves the worker registry: well inside the 25 s a dyno
manager gives before SIGKILL. A child whose supervisor is gone stops the
same way (``workers.lifeline``). A process killed outright leaves its
leases to expire; the next claim anywhere puts them back in ready.

Redis away (``crawler.store.outage``). Each Redis call of a runner or a service
waits for Redis up to ``PEERCRAWL_REDIS_WAIT_SECONDS`` inside the client;
the claim loop waits on its own for as long as it takes (until the worker
stops), so a worker never exits for an outage and claims again as soon as
Redis is back. Every loop reports to the process's one ``Outage``, which
logs one warning when Redis goes and one line when it is back; nothing is
logged per failed call in between. A visit whose Redis step gave up ends
(its lease expires, the torrent comes back); one whose reply was lost and
that was sent again counts nothing twice (the scripts' marks and lease
tokens, docs/redis.md).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from functools import partial

import gevent
import redis
from gevent.event import Event

from crawler import logs
from crawler.errors import StoreError
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.store import patience
from crawler.store.outage import Outage
from workers.autoscale import Sample
from workers.heartbeat import Heartbeat, WorkerHealth
from workers.runners import Runners, Slot
from workers.services import Services
from workers.slots import Slots
from workers.visit import Visit, Visitor

log = logs.get("worker")

# Time kept back from shutdown_seconds for handing back torrents, the last
# StatHat post and closing the sources.
SHUTDOWN_MARGIN = 6.0
# Waits between claims when nothing was ready, growing to the maximum.
IDLE_POLL = (0.2, 2.0)
# The shortest wait for a torrent about to fall due (others may claim it first).
IDLE_POLL_MIN = 0.01


class Worker:
    """One worker process's pool.

    ``queue``: the ``Queue``; ``visitor``: a ``Visitor``. ``concurrency``:
    the pool size, or None for ``autoscaler`` to choose it. ``flusher``: a
    ``Flusher`` run in the background (None: none). ``on_visit``: called with
    each ``Visit`` (``run``'s progress). ``heartbeat``: a ``Heartbeat``.
    Bounds come from ``queue.settings`` (an outage is reported after
    ``outage_after`` failed visits in a row). ``slots``: the runners and
    their leases (``Slots``; ``slots.target`` is the pool size).
    ``outage``: the process's ``Outage`` (default: the one of
    ``queue.client``, made by ``store.connect``).
    ``run()`` returns the process exit code (0).
    """

    def __init__(self, queue: Queue, visitor: Visitor, *, concurrency: int | None = None, autoscaler=None,
                 max_visits: int | None = None, until_idle: bool = False, duration: float | None = None,
                 flusher=None, sweep: Callable | None = None, heartbeat: Heartbeat | None = None,
                 on_visit: Callable[[Visit], None] | None = None, outage: Outage | None = None):
        self.queue, self.visitor = queue, visitor
        self.outage = outage or patience.outage(queue.client) or Outage(patience=queue.settings.redis_wait_seconds)
        self.view = QueueView(queue.client, queue.keys)
        self.settings = queue.settings
        self.autoscaler = autoscaler
        self.slots: Slots[Slot] = Slots(concurrency if concurrency is not None else autoscaler.size, max_visits)
        self.until_idle, self.duration = until_idle, duration
        self.heartbeat = heartbeat or Heartbeat(queue.client, queue.keys)
        self.health = WorkerHealth(self.settings.outage_after)
        self.on_visit = on_visit
        self.stopping = Event()  # stop claiming
        self.stop_asked = False  # stop() was called: a torrent claimed from now on is handed back
        self.signalled = False
        self.hurry = False  # a second Ctrl-C: the drain waits no more
        self._signal_at = 0.0
        self._wake = Event()  # a slot came free or the target changed: the claim loop looks again
        self.services = Services(queue, self.slots, self.heartbeat, self.outage, figures=self.figures,
                                 sample=self.sample, orphaned=self._orphaned, resized=self._wake.set,
                                 draining=self.stopping, autoscaler=autoscaler, flusher=flusher, sweep=sweep,
                                 shutdown_margin=SHUTDOWN_MARGIN)
        self._started = time.monotonic()
        self.runners = Runners(self.slots, visitor, queue, self.outage, claiming=self._claiming,
                               stopping=lambda: self.stop_asked, ended=self._noted, freed=self._wake.set)

    # --- control ------------------------------------------------------------
    def stop(self, signum: int | None = None, reason: str | None = None) -> None:
        """Stop claiming; with a signal (or a ``reason`` as pressing), running visits get the shutdown
        deadline; a second SIGINT (Ctrl-C again) kills them at once, handing their torrents back."""
        if signum == signal.SIGINT and self.signalled and not self.hurry:
            self.hurry = True
            log.warning("worker_stopping_now", in_flight=self.slots.running,
                        message=f"stopping now: handing {self.slots.running} torrents back")
        if (signum is not None or reason is not None) and not self.signalled:
            self.signalled = True
            self._signal_at = time.monotonic()
            if reason is not None:
                why = {"reason": reason}
            else:
                assert signum is not None  # one of the two, by the condition above
                why = {"signal": signal.Signals(signum).name}
            budget = max(self.settings.shutdown_seconds - SHUTDOWN_MARGIN, 1.0)
            again = "; Ctrl-C again stops now" if signum == signal.SIGINT else ""
            log.info("worker_stopping", **why, in_flight=self.slots.running,
                     message=f"finishing {self.slots.running} visits (at most {budget:g} s){again}")
        self.stop_asked = True
        self.stopping.set()
        self._wake.set()

    def install_signals(self) -> None:
        """Stop on SIGTERM and SIGINT (``stop`` with the signal)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(sig, self.stop, sig)

    def _claiming(self) -> bool:
        """True while the worker still claims: not stopping, within ``--duration``."""
        if self.stopping.is_set():
            return False
        return self.duration is None or time.monotonic() - self._started < self.duration

    # --- the loop -------------------------------------------------------------
    def run(self) -> int:
        """Claim and visit until a stop condition; returns 0."""
        self._started = time.monotonic()
        log.info("worker_started", id=self.heartbeat.id, concurrency=self.slots.target,
                 auto=self.autoscaler is not None, until_idle=self.until_idle,
                 max_visits=self.slots.limit, duration=self.duration,
                 # whether the visit's modules run compiled (setup.py): a wheel built without a C compiler runs none
                 compiled=not (sys.modules[Visitor.__module__].__file__ or "").endswith(".py"))
        self.services.start()
        idle = IDLE_POLL[0]
        try:
            while self._claiming() and not self.slots.exhausted():
                free = self.slots.free()
                if free <= 0:
                    self._wait(1.0)
                    continue
                try:
                    # However long Redis is away: the worker has nothing else to do.
                    leases = self.outage.run(partial(self.queue.claim, free), "claim", stop=self.stopping,
                                             patience=None)
                except (StoreError, redis.RedisError) as e:
                    if not self.stopping.is_set():  # not an outage (or the worker stops): say what
                        log.warning("claim_failed", error=str(e))
                    self._wait(idle)
                    idle = min(idle * 2, IDLE_POLL[1])
                    continue
                if leases:
                    idle = IDLE_POLL[0]
                    self.runners.start(leases)
                    continue
                if self.until_idle and not self.slots.running and self._idle():
                    log.info("worker_idle", note="nothing ready or in flight")
                    break
                self._wait(self._idle_delay(idle))
                idle = min(idle * 2, IDLE_POLL[1])
        finally:
            self._shutdown()
        return 0

    def _idle(self) -> bool:
        try:
            c = self.view.counts()
        except StoreError:
            return False
        return c["ready"] == 0 and c["in_flight"] == 0

    def _idle_delay(self, idle: float) -> float:
        """How long to wait before claiming again when nothing was ready: ``idle`` (growing
        while the queue stays empty), or less when a torrent falls due sooner, so a paced
        queue is visited on time rather than up to ``IDLE_POLL[1]`` late."""
        try:
            due = self.view.next_due()
        except StoreError:
            return idle
        if due is None:
            return idle
        return min(idle, max(due, IDLE_POLL_MIN))

    def _wait(self, seconds: float) -> None:
        self._wake.clear()
        self._wake.wait(seconds)

    def _noted(self, v: Visit) -> None:
        """Count a finished visit in the health figures and tell ``on_visit``."""
        # A visit refused by policy or by its trackers counts, but is no sign of an outage, nor of its end.
        if v.state != "skipped" and self.health.note(v.state != "failed", v.peers,
                                                     network=v.state != "failed" or v.network):
            self._outage_changed()
        if self.on_visit is not None:
            self.on_visit(v)

    def _outage_changed(self) -> None:
        if self.health.failing:
            log.error("network_outage", streak=self.health.streak,
                      message=(f"the last {self.health.streak} visits all failed: no tracker and no DHT node "
                               "answered. Is this worker's network down? Scores are kept, nothing is evicted."))
        else:
            log.warning("network_recovered", message="a visit was answered again")
        self.services.beat()

    # --- what the services read ---------------------------------------------
    def _orphaned(self) -> None:
        """The supervisor died and the death signal did not come (workers.lifeline): drain as on SIGTERM."""
        if not self.stop_asked:
            log.warning("worker_orphaned", parent=self.heartbeat.parent, message="its supervisor is gone: stopping")
            self.stop(reason="supervisor gone")

    def figures(self) -> dict:
        """What the heartbeat publishes."""
        return {
            "concurrency": self.slots.target,
            "auto": self.autoscaler is not None,
            "in_flight": self.slots.running,
            "visits": self.health.visits,
            "failed_visits": self.health.failed,
            "peers": self.health.peers,
            "visits_per_hour": round(self.health.per_hour(), 1),
            # the process's CPU time: what a visit costs it, so `status` knows what one core allows
            "cpu_s": round(time.process_time(), 3),
            "failing": self.health.failing,
            # With --concurrency auto: the last decision and what it saw, for `status`.
            **({"autoscale": self.autoscaler.history[-1]} if self.autoscaler and self.autoscaler.history else {}),
            # Outages of Redis this process saw (redis_down_s: the one under way).
            **self.outage.figures(),
        }

    def sample(self) -> Sample:
        """What the autoscaler decides from: the pool's size, busy runners, visits, queue latency, torrents due."""
        try:
            counts = self.view.counts()
        except StoreError:  # Redis trouble: the autoscaler holds the size
            return Sample(size=self.slots.target, busy=self.slots.running, visits=self.health.visits, latency=None)
        return Sample(size=self.slots.target, busy=self.slots.running, visits=self.health.visits,
                      latency=counts["queue_latency_s"], ready=counts["ready"])

    def _drain(self) -> None:
        """Wait for the running visits (bounded), then kill the rest, which hand their torrents back."""
        # A normal end (until-idle, max-visits, duration) lets visits finish;
        # a signal (now or while waiting) bounds the wait by the shutdown budget.
        normal_end = time.monotonic() + self.settings.visit_deadline + 5.0
        budget = max(self.settings.shutdown_seconds - SHUTDOWN_MARGIN, 1.0)
        while self.slots.held and not self.hurry:
            end = self._signal_at + budget if self.signalled else normal_end
            left = end - time.monotonic()
            if left <= 0:
                break
            gevent.joinall(self.runners.greenlets(), timeout=min(0.2, left))
        if self.slots.held:
            log.warning("handing_back", torrents=self.slots.running)
            gevent.killall(self.runners.greenlets(), block=True, timeout=4.0)

    def _shutdown(self) -> None:
        self.stopping.set()
        self._drain()
        self.services.stop()
        # Redis away at exit: the entry expires instead. False: the block ends silently at the
        # timeout (gevent documents it; its stubs leave it out).
        with gevent.Timeout(2.0, False):  # type: ignore[arg-type]
            self.heartbeat.leave()
        # where the visits held their slots, stage by stage (workers.visit_stages), and how their
        # recordings were shared: batches, and the peers in them (crawler.counters.batcher), and
        # how many their swarm record settled (crawler.counters.swarm_record), and how their
        # completions were (workers.completions: calls of Queue.complete_many, the visits in them)
        recorder, done = self.visitor.recorder, self.visitor.completions
        shared = {"batches": recorder.batches, "peers": recorder.units, "swarms_known": recorder.recorder.swarms.known}
        log.info("worker_stopped", visits=self.health.visits, failed=self.health.failed,
                 claimed=self.slots.claimed, stages=self.visitor.stages.summary(), recordings=shared,
                 completions={"batches": done.batches, "visits": done.units})
