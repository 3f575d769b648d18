"""``--concurrency auto``: the pool size that keeps queue latency low.

Strategy: every ``interval`` seconds (``wait``) the worker hands the controller
a ``Sample`` of its figures (pool size, busy runners, visits so far, queue
latency), and the controller measures the rest itself. It weighs

- queue latency: how late the oldest due torrent is (``QueueView.counts``);
- busy: how many of the pool's runners hold a torrent, on average over the
  interval (sampled by the probe greenlet);
- visits per second over the interval (from the sample's visit count);
- the CPU share of this process (1.0 = one core: a gevent process runs its
  Python on one core);
- event-loop lag: how late the probe greenlet, sleeping 50 ms, wakes up on
  average (how long a greenlet ready to run waits for the others);
- the Redis round trip, timed on a plain blocking socket outside the gevent
  loop (so it measures Redis and the network, not our own lag), against the
  best seen;
- the *slot*: how long a visit holds its runner, by Little's law (mean busy
  runners / visits per second, from an interval of at least
  ``MIN_SLOT_VISITS`` visits), against the lowest seen since the queue was
  last on time (then nothing queues: the slot is the trackers' and Redis's
  latency, measured again each time the crawl catches up, so it follows
  them without the drift a lowest that fades by itself would give a pool
  that stays behind).

*Queued*: the slot past ``slot_factor`` × its lowest: visits wait for the
process (its core, Redis, a tracker's budget), not for the network. A full
core alone is no reason to stop: a larger pool shares its batches
(recording, announces, completions) among more visits, each costing less
CPU (on loopback a process fills its core at 8 runners and still visits
15-30 % faster at 24). Nor is a rate that did not rise at once after a
growth: it moves by 10-25 % from one interval to the next at one size, more
than a step gains; where more runners cannot visit faster, each holds its
slot longer (busy grows, the rate does not), which the slot shows within a
few steps, bounded. ``slot_factor`` 2.5: on loopback a first visit's slot
passes it near 24 runners, which visit at ~0.9 of 64 runners' rate with
~0.4 of their slot; at 2 a pool held at 17 with its core 0.64 busy.
*Saturated*: lag above ``lag_high``, the round trip
above ``rtt_factor`` × best + 2 ms, or, in an interval too short to give a
slot, CPU share at least ``cpu_busy``. *Overloaded*: lag above
``lag_max`` (tracker replies would wait long enough to risk their timeouts)
or the round trip above ``overload_factor`` × best + 20 ms (Redis, shared by
every worker, is struggling). Then, in this order:

- overloaded: shrink by a fifth; the size that overloaded is a *ceiling*;
- behind (latency above ``latency_target``), ≥ 90 % of the pool busy,
  neither queued nor saturated: grow by a quarter, staying under any
  ceiling; at the *start*, until the first decision that does not grow,
  double instead;
- less than half the pool busy and not behind: shrink by a tenth (*idle*),
  but not back to a size that fell behind (a *floor*);
- otherwise hold: keeping up, or queued or saturated while behind (the
  most this process can do without a backlog: growing would only lengthen
  slots, shrinking would leave the process idle while visits wait on the
  network).

Why a start. A quarter a step takes a pool of 8 to 64 runners in nine steps,
45 s at the default interval: a pass over a few thousand torrents, or a
worker's first minute, ran at 8-17 runners, its core half busy
(bench/bench_visit_cost.py with ``--concurrency auto``). Doubling gets there in
three steps, a decision every ``start_interval`` (1 s): a doubled pool's figures
settle within a second (16 runners of 200 ms visits: 80 visits). The pool's
start-up (no runner busy yet) must not weigh in the first decision's busy
share, so the probe's samples count from the first busy runner on, and the
first decision waits until they span half a ``start_interval``, or a whole
interval where no runner gets busy (an idle worker decides as a running one
does). A backlog is not late yet so soon (the queue's latency is the oldest
due torrent's lateness), so during the start the torrents due now count as
late by the time this process's rate needs for them: a worker started into a
backlog grows at once. Past the start it does not: with other workers
sharing the queue, one process's rate overstates that time. A first pass of
10,000 torrents then ended at 64 runners, not 16, at 1.14x the visits/s (a
first decision after a whole interval left such a pass at 8 runners for half
its time). The start ends at the first
decision that does not grow; where that is because visits queue, the last
doubling went too far: it becomes a ceiling, and the pool goes back to the size
before it, grown by a quarter, to go on from there as above. A saturated
process holds, as ever: its signs (a round trip, the lag, one sample each) say
the process or Redis is busy now, not that the size is wrong (on loopback a
Redis round trip waits behind a recording's call: a doubling that held on such
a sample went back to 10 runners where 32 visited faster).

Ceilings and floors are forgotten after ``memory_steps`` decisions, so the
controller probes again once conditions may have changed. Without them the
size would saw for ever between two neighbours: one that is too small and
one that overloads.

``settled`` tells from the history whether the size settled: it did not
change during the last ``STABLE_STEPS`` decisions. The size always stays
within ``[low, high]`` (``concurrency_min`` and ``concurrency_max``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent
import redis
from gevent.event import Event

from crawler import logs
from workers.round_trip import RoundTrip

log = logs.get("worker.autoscale")

# Decisions without a size change after which the size counts as settled.
STABLE_STEPS = 5
# How often the lag probe wakes up.
LAG_PERIOD = 0.05
# The fewest visits in an interval whose slot counts (fewer: too noisy to weigh).
MIN_SLOT_VISITS = 50


@dataclass(frozen=True)
class Sample:
    """The pool's figures at one step, as the worker sees them.

    ``size``: the pool size now; ``busy``: runners holding a torrent now
    (stands in for the probe's mean when the probe has not run);
    ``visits``: visits counted since the worker started; ``latency``: queue
    latency in seconds, None when Redis could not tell (the size is held);
    ``ready``: torrents due now, waiting for a runner.
    """

    size: int
    busy: int
    visits: int
    latency: float | None
    ready: int = 0


class Autoscaler:
    """Chooses the pool size; ``step(sample)`` returns the new size.

    ``client``: the worker's Redis client (its connection settings are used
    for the out-of-loop round trip; TLS and cluster clients fall back to a
    PING through the client). ``low``/``high``: the bounds.
    """

    def __init__(self, client: redis.Redis, low: int, high: int, *, interval: float = 5.0,
                 latency_target: float = 5.0, cpu_busy: float = 0.85, lag_high: float = 0.1,
                 lag_max: float = 1.0, rtt_factor: float = 4.0, overload_factor: float = 10.0,
                 memory_steps: int = 60, slot_factor: float = 2.5,
                 start: int | None = None, start_interval: float = 1.0):
        self.client = client
        self.low, self.high = low, high
        self.size = max(low, min(high, start if start is not None else max(low, 8)))
        self.interval = interval
        self.start_interval = min(start_interval, interval)
        self.latency_target = latency_target
        self.cpu_busy, self.lag_high, self.lag_max = cpu_busy, lag_high, lag_max
        self.rtt_factor, self.overload_factor = rtt_factor, overload_factor
        self.memory_steps = memory_steps
        self.slot_factor = slot_factor
        self.best_slot: float | None = None  # the lowest slot (seconds) since the queue was last on time
        self.ceiling: int | None = None  # a size that overloaded: not grown back to
        self._ceiling_left = 0
        self.floor: int | None = None  # a size that fell behind: not shrunk back to
        self._floor_left = 0
        self.starting = True  # the start (module note): doubling until a decision does not grow
        self._visits = (time.monotonic(), 0)
        self._busy_sum, self._busy_n = 0, 0
        self.best_rtt: float | None = None
        self._cpu = (time.monotonic(), time.process_time())
        self._lag_sum, self._lag_n = 0.0, 0
        self.round_trip = RoundTrip(client)
        self._t0 = time.monotonic()
        self._working: float | None = None  # when the probe first saw a busy runner (module note)
        self.history: list[dict] = []  # each step's sample and decision, oldest first (last 1000)

    def wait(self) -> float:
        """Seconds to the next decision: ``start_interval`` during the start, else ``interval``."""
        return self.start_interval if self.starting else self.interval

    def _weighable(self) -> bool:
        """Whether the start's first decision has figures to weigh: the pool worked (a runner busy) for
        half a ``start_interval``, or an interval passed without its working (module note)."""
        now = time.monotonic()
        if self._working is not None:
            return now - self._working >= self.start_interval / 2
        return now - self._t0 >= self.interval

    # --- samples ------------------------------------------------------------
    def _cpu_share(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        w0, c0 = self._cpu
        self._cpu = (wall, cpu)
        return (cpu - c0) / max(wall - w0, 1e-6)

    def probe(self, busy: Callable[[], int], stop: Event) -> None:
        """The probe (a service greenlet): how late a short sleep wakes up, and ``busy()``, until ``stop`` is set."""
        while not stop.is_set():
            t = time.perf_counter()
            gevent.sleep(LAG_PERIOD)
            self._lag_sum += max(0.0, time.perf_counter() - t - LAG_PERIOD)
            self._lag_n += 1
            b = busy()
            if self._working is None:
                if not b:
                    continue  # the pool's start-up: not its busy share
                # the figures of the first decision start with the pool's work
                self._working = now = time.monotonic()
                self._visits, self._cpu = (now, 0), (now, time.process_time())
            self._busy_sum += b
            self._busy_n += 1

    def _lag(self) -> float:
        lag = self._lag_sum / self._lag_n if self._lag_n else 0.0
        self._lag_sum, self._lag_n = 0.0, 0
        return lag

    def _busy(self, now: int) -> float:
        """Mean busy runners since the last step (``now`` when the probe has not run)."""
        busy = self._busy_sum / self._busy_n if self._busy_n else float(now)
        self._busy_sum, self._busy_n = 0, 0
        return busy

    def _rtt(self) -> float | None:
        """One Redis round trip in seconds (``RoundTrip``), the best seen kept; None when none was timed."""
        rtt = self.round_trip.measure()
        if rtt is not None:
            self.best_rtt = rtt if self.best_rtt is None else min(self.best_rtt, rtt)
        return rtt

    def close(self) -> None:
        """Close the connection used to time Redis round trips."""
        self.round_trip.close()

    # --- the decision -----------------------------------------------------------
    def _rate(self, visits: int) -> tuple[float, int]:
        """Visits per second since the last step, and how many, from the worker's visit count."""
        now = time.monotonic()
        t0, v0 = self._visits
        self._visits = (now, visits)
        return (visits - v0) / max(now - t0, 1e-6), visits - v0

    def _queued(self, slot: float | None, behind: bool) -> bool:
        """Visits wait for the process: ``slot`` past ``slot_factor`` x the lowest since the queue was
        last on time, which it may lower (on time: it is the lowest; None: no slot to weigh)."""
        if slot is None:
            return False
        best = self.best_slot
        self.best_slot = best = slot if best is None or not behind else min(best, slot)
        return slot > self.slot_factor * best

    def _pressure(self, cpu: float, rtt: float | None, lag: float, slot: float | None) -> tuple[bool, bool]:
        """(overloaded, saturated), as the strategy above defines them."""
        full = slot is None and cpu >= self.cpu_busy  # no slot to tell whether visits queue: a guess
        best = self.best_rtt
        if rtt is None or best is None:  # no round trip to weigh: the lag and the CPU alone
            return lag > self.lag_max, full or lag > self.lag_high
        overloaded = lag > self.lag_max or rtt > self.overload_factor * best + 0.020
        saturated = full or lag > self.lag_high or rtt > self.rtt_factor * best + 0.002
        return overloaded, saturated

    def _cap(self, size: int) -> None:
        """Remember ``size`` as a ceiling for ``memory_steps`` decisions."""
        self.ceiling, self._ceiling_left = size, self.memory_steps

    def _grow(self, size: int) -> tuple[int, str]:
        """Behind with the pool busy: a quarter more (twice as many at the start), under any ceiling;
        ``size`` becomes a floor."""
        if self.starting:
            new, why = 2 * size, "behind: starting"
        else:
            new, why = size + max(1, math.ceil(size * 0.25)), "behind"
        self.floor, self._floor_left = size, self.memory_steps
        if self.ceiling is not None:
            new = min(new, self.ceiling - 1)
            if new <= size:
                new, why = size, "hold: under a ceiling"
        return new, why

    def _shrink(self, size: int) -> tuple[int, str]:
        """Idle: a tenth less, but not down to a floor."""
        new = size - max(1, math.ceil(size * 0.1))
        if self.floor is not None:
            new = max(new, self.floor + 1)
        return min(new, size), ("idle" if new < size else "hold: above a floor")

    def _started(self, size: int, new: int, why: str) -> tuple[int, str]:
        """The start ends with decision ``(new, why)`` at ``size``: one that holds because visits queue
        just after a doubling makes the doubled size a ceiling and goes back to the size before it (the
        floor that doubling left), grown by a quarter (module note)."""
        self.starting = False
        if self.floor is not None and why == "hold: queued":
            self._cap(size)
            new, _ = self._grow(self.floor)
            why = "back from the start"
        return new, why

    def _age(self, why: str) -> None:
        """One decision older: ceilings and floors not renewed by it are forgotten after ``memory_steps``."""
        if self._ceiling_left > 0 and why != "overloaded":
            self._ceiling_left -= 1
            if self._ceiling_left == 0:
                self.ceiling = None
        if self._floor_left > 0 and not why.startswith("behind"):
            self._floor_left -= 1
            if self._floor_left == 0:
                self.floor = None

    def decide(self, size: int, busy: float, latency: float, cpu: float, rtt: float | None,
               lag: float = 0.0, slot: float | None = None, backlog: float = 0.0) -> tuple[int, str]:
        """The next size and why, from one sample (pure but for the memories: ceiling, floor, lowest
        slot). ``slot``: seconds a visit held its runner, None when the interval had too few visits;
        ``backlog``: seconds this process's rate needs for the torrents due now, which at the start
        counts as latency (module note)."""
        overloaded, saturated = self._pressure(cpu, rtt, lag, slot)
        behind = max(latency, backlog if self.starting else 0.0) > self.latency_target
        queued = self._queued(slot, behind)
        if overloaded:
            new, why = size - max(1, math.ceil(size * 0.2)), "overloaded"
            self._cap(size)
        elif behind and busy >= 0.9 * size and not saturated and not queued:
            new, why = self._grow(size)
        elif busy < 0.5 * size and not behind:
            new, why = self._shrink(size)
        elif behind:
            new, why = size, "hold: saturated" if saturated else "hold: queued" if queued else "hold"
        else:
            new, why = size, "hold"
        if self.starting and not why.startswith("behind"):
            new, why = self._started(size, new, why)
        self._age(why)
        return max(self.low, min(self.high, new)), why

    def step(self, sample: Sample) -> int:
        """Weigh ``sample`` with this process's own measures (CPU, lag, round trip); the new size.
        Before the start's first decision has figures to weigh (``_weighable``), the size is kept and
        nothing is recorded."""
        if self.starting and self.floor is None and not self._weighable():
            return self.size
        cpu = self._cpu_share()
        lag = self._lag()
        rate, visited = self._rate(sample.visits)
        rtt = self._rtt()
        latency = sample.latency
        if latency is None:  # Redis trouble: hold the size rather than guess
            return self.size
        busy = self._busy(sample.busy)
        slot = busy / rate if visited >= MIN_SLOT_VISITS and rate > 0 else None  # Little's law
        backlog = sample.ready / rate if rate > 0 else math.inf if sample.ready else 0.0
        new, why = self.decide(sample.size, busy, latency, cpu, rtt, lag, slot, backlog)
        slot_ms = None if slot is None else round(slot * 1000, 1)
        if new != self.size:
            log.info("pool_resized", size=new, was=self.size, why=why, latency_s=latency,
                     visits_per_s=round(rate, 1), cpu=round(cpu, 2), lag_ms=round(lag * 1000, 1),
                     rtt_ms=None if rtt is None else round(rtt * 1000, 2), slot_ms=slot_ms)
        self.history.append({"t": round(time.monotonic() - self._t0, 1), "size": new, "was": self.size, "why": why,
                             "busy": round(busy, 1), "latency_s": latency, "visits_per_s": round(rate, 1),
                             "cpu": round(cpu, 2), "lag_ms": round(lag * 1000, 1),
                             "rtt_ms": None if rtt is None else round(rtt * 1000, 3), "slot_ms": slot_ms})
        del self.history[:-1000]
        self.size = new
        return new


def settled(history: list[dict], steps: int = STABLE_STEPS) -> dict:
    """Whether the size in ``history`` settled: ``{"stable", "size", "since_s"}``.

    Stable: the size did not change during the last ``steps`` decisions.
    ``since_s``: the time (``t``) of the last change (0.0: never changed).
    """
    if not history:
        return {"stable": False, "size": None, "since_s": None}
    unchanged = 0
    for x in reversed(history):
        if x["size"] != x["was"]:
            break
        unchanged += 1
    changes = [x["t"] for x in history if x["size"] != x["was"]]
    return {"stable": unchanged >= steps, "size": history[-1]["size"], "since_s": changes[-1] if changes else 0.0}
