"""Where a visit holds its slot: the time of each stage, per visit and over a process's life.

A visit's slot is taken from the moment its torrent is handed to a runner
until the runner holds its next one. ``Laps`` times one visit's stages as
it passes them (one ``time.perf_counter`` each); ``StageTimes`` keeps every
visit's laps of a process in histograms, which the worker logs when it stops
(``worker_stopped``'s ``stages``) and ``/metrics`` shows live
(``peercrawl_worker_visit_stage_seconds``). The buckets are those of the
queue's round trips (``crawler.queue.rates``: each 9 % wider than the last)
counted from a microsecond rather than a millisecond: most stages are round
trips of well under one. The stages, in a visit's order:

- ``wait``: from the hand-out of the claimed torrent to the visit's start;
- ``plan``: the plan's round trip (trackers and source notes);
- ``scrape``: the scrape stage (a seat in a scrape asked ahead, or one sent);
- ``announce``: the announces and the DHT lookup, each after its place in
  its budget;
- ``note``: the source notes made (a round trip only for a visit no source answered: an
  answered one writes them with its completion);
- ``record``: the peers' recording (its wait for its batch included), and
  ``torrents.processed`` when StatHat counts it;
- ``size``: a DHT swarm's size from the nodes' bloom filters (BEP 33);
- ``complete``: the completion's round trip (a failed or skipped visit's
  settling, which skips the stages from ``record`` on);
- ``next``: the next torrent's claim (from what is held, or a claim sent).

A runner's batch (``Visitor.visit_many``) passes the stages together: each
visit of it holds its slot through each stage the batch has, and is counted
there (a stage no visit of the batch reaches is not counted for any), so
each stage's figures are over the visits that had it. ``slot`` is each
visit's whole time, the sum of its stages (the median of the sums, not a
sum of medians).
"""

from __future__ import annotations

import math
import time

from crawler.queue import rates

STAGES = ("wait", "plan", "scrape", "announce", "note", "record", "size", "complete", "next")
# A visit's whole time in its slot, every stage it had.
SLOT = "slot"


class Laps:
    """One visit's stages as it passes them: ``lap(stage)`` ends ``stage`` now."""

    __slots__ = ("at", "times")

    def __init__(self, waited: float = 0.0):
        self.at = time.perf_counter()
        self.times: dict[str, float] = {"wait": max(waited, 0.0)}

    def lap(self, stage: str) -> None:
        """``stage`` ended now: its time is what passed since the last lap."""
        now = time.perf_counter()
        self.times[stage] = now - self.at
        self.at = now

    def copy(self) -> Laps:
        """Laps of their own from here on (a part of a batch going on apart)."""
        other = Laps()
        other.at, other.times = self.at, dict(self.times)
        return other

    def whole(self) -> dict[str, float]:
        """The stages' times and, as ``slot``, their sum: what the process's figures count."""
        return {**self.times, SLOT: sum(self.times.values())}


class StageTimes:
    """Every visit's stage times of one process, as histograms (module note)."""

    def __init__(self) -> None:
        self.histograms: dict[str, dict[int, int]] = {s: {} for s in (*STAGES, SLOT)}
        self.sums = dict.fromkeys((*STAGES, SLOT), 0.0)

    def add(self, times: dict[str, float], visits: int = 1) -> None:
        """Count the times (``Laps.whole``: the stages and the ``slot``) of ``visits`` visits that had
        them (a batch's).

        ``bucket`` written out (ten stages a batch: its call was most of the cost)."""
        histograms, sums = self.histograms, self.sums
        for stage, seconds in times.items():
            h = histograms[stage]
            us = seconds * SCALE * 1000.0  # rates.bucket's product, in its order
            k = _floor(_STEPS * _log2(us)) if us >= 1.0 else 0
            h[k] = h.get(k, 0) + visits
            sums[stage] += seconds * visits

    def summary(self) -> dict[str, dict]:
        """Per stage reached: the visits that had it, their median, 99th percentile and mean, in ms."""
        out = {}
        for stage in (*STAGES, SLOT):
            h = self.histograms[stage]
            n = sum(h.values())
            if n:
                p50, p99 = percentile(h, 0.5), percentile(h, 0.99)
                out[stage] = {"visits": n, "p50_ms": _ms(p50), "p99_ms": _ms(p99),
                              "mean_ms": round(1000 * self.sums[stage] / n, 3)}
        return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 3)


# The queue's round-trip buckets count from a millisecond; these count the same from a microsecond,
# so every time goes through them a thousand times larger.
SCALE = 1000.0


def bucket(seconds: float) -> int:
    """The bucket of ``seconds``: ``rates.bucket`` in microseconds, at least 0."""
    return rates.bucket(seconds * SCALE)


# ``bucket`` as ``StageTimes.add`` computes it: floor(STEPS * log2(microseconds)), 0 below one.
_STEPS, _floor, _log2 = rates.STEPS, math.floor, math.log2


def percentile(histogram: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of a histogram of ``bucket``: seconds at its bucket's middle (None: empty)."""
    p = rates.percentile(histogram, q)
    return None if p is None else p / SCALE
