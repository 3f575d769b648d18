"""``--concurrency auto``: the pool size that keeps queue latency low (seed 000's wish).

Strategy: every ``interval`` seconds the controller samples queue latency
(how late the oldest due torrent is), how much of the pool is busy, the
process's CPU share and the Redis round-trip time, then

- shrinks by a fifth when the process is overloaded (CPU above ``cpu_high``,
  or the round trip above ``rtt_factor`` × the best seen, plus 2 ms): more
  greenlets would only queue behind the CPU or Redis and make every visit
  slower;
- grows by a quarter when the pool is saturated (≥ 90 % busy), torrents are
  waiting (latency above ``latency_target``) and the CPU is below
  ``cpu_grow``;
- shrinks by a tenth when less than half the pool is busy and nothing waits;
- holds otherwise. The gap between ``cpu_grow`` and ``cpu_high`` is the
  hysteresis that lets the size settle instead of oscillating.

The size always stays within ``[low, high]`` (``concurrency_min`` and
``concurrency_max``).
"""

from __future__ import annotations

import math
import time

import redis

from crawler import logs

log = logs.get("worker.autoscale")


class Autoscaler:
    """Chooses the pool size; ``step(worker)`` returns the new size."""

    def __init__(self, client: redis.Redis, low: int, high: int, *, interval: float = 5.0,
                 latency_target: float = 5.0, cpu_grow: float = 0.70, cpu_high: float = 0.90,
                 rtt_factor: float = 4.0, start: int | None = None):
        self.client = client
        self.low, self.high = low, high
        self.size = max(low, min(high, start if start is not None else max(low, 8)))
        self.interval = interval
        self.latency_target = latency_target
        self.cpu_grow, self.cpu_high = cpu_grow, cpu_high
        self.rtt_factor = rtt_factor
        self.best_rtt: float | None = None
        self._cpu = (time.monotonic(), time.process_time())
        self.history: list[dict] = []  # each step's sample and decision, newest last

    def _cpu_share(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        w0, c0 = self._cpu
        self._cpu = (wall, cpu)
        return (cpu - c0) / max(wall - w0, 1e-6)

    def _rtt(self) -> float | None:
        t = time.perf_counter()
        try:
            self.client.ping()
        except redis.RedisError:
            return None
        rtt = time.perf_counter() - t
        self.best_rtt = rtt if self.best_rtt is None else min(self.best_rtt, rtt)
        return rtt

    def decide(self, size: int, busy: int, latency: float, cpu: float, rtt: float | None) -> tuple[int, str]:
        """The next size and why, from one sample (pure; tests call it directly)."""
        slow_redis = rtt is not None and self.best_rtt is not None and rtt > self.rtt_factor * self.best_rtt + 0.002
        if cpu > self.cpu_high or slow_redis:
            new, why = size - max(1, math.ceil(size * 0.2)), "overloaded"
        elif busy >= 0.9 * size and latency > self.latency_target and cpu < self.cpu_grow:
            new, why = size + max(1, math.ceil(size * 0.25)), "behind"
        elif busy < 0.5 * size and latency <= self.latency_target:
            new, why = size - max(1, math.ceil(size * 0.1)), "idle"
        else:
            new, why = size, "hold"
        return max(self.low, min(self.high, new)), why

    def step(self, worker) -> int:
        """Sample ``worker`` (its queue, pool and target) and return the new size."""
        cpu = self._cpu_share()
        rtt = self._rtt()
        try:
            latency = worker.queue.counts()["queue_latency_s"]
        except Exception:  # Redis trouble: hold the size rather than guess
            return self.size
        new, why = self.decide(worker.target, len(worker.pool), latency, cpu, rtt)
        if new != self.size:
            log.info("pool_resized", size=new, was=self.size, why=why, latency_s=latency,
                     cpu=round(cpu, 2), rtt_ms=None if rtt is None else round(rtt * 1000, 2))
        self.size = new
        self.history.append({"size": new, "why": why, "cpu": round(cpu, 2), "latency_s": latency,
                             "busy": len(worker.pool)})
        del self.history[:-100]
        return new
