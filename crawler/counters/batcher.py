"""The recordings of many visits made together (group commit of visits).

Strategy. A worker runs dozens of visits at once, each in its own greenlet,
and each recording used to cost that greenlet its own probe, its own place
calls (crawls of several counter shards) and its own record calls, with
every IP parsed, located and fingerprinted in the middle of other visits'
work. With a ``Batcher`` a visit's greenlet hands its peers over and
parks; a recording greenlet takes the visits handed over meanwhile (at most
``MAX_IPS`` peers between them) and records them with one
``Recorder.record_visits``: each distinct IP parsed and located once, every
probe in one round trip, then every place call (one per counter shard, an
IP and place met in several visits sent once) and every record call. There
is no timer, as in ``crawler.store.coalesce``: a visit waits at most for the
recordings already under way (``IN_FLIGHT``), so a batch is as large as the
load makes it and nothing waits for a batch to fill.

Why batches are bounded by peers, several under way. A worker's visits move
in cohorts: a batch's replies release its visits together, which complete,
claim, announce and come back together. Taken whole, a cohort of 60 visits
was ~18 ms of Python that let no other greenlet run, then ~40 ms of
``record.lua`` during which the worker had nothing left to do, while the
other recording greenlet took the stragglers one at a time: neither the
worker's core nor Redis's was busy much more than half the time. Cut into
batches of a few ms of work each, with several under way, one batch is
prepared while Redis runs the one before (bench/bench_visit_cost.py).

What stays as it was. A visit is still recorded by script calls that each
hold one visit's IPs of one shard, atomic, in order, so a process killed at
any line leaves each call done or not, and a retried visit counts exactly
what was not counted (``recorder``). A batch is recorded at one time, the
latest of its visits' times (milliseconds apart: the round trips it waited
for). A bad info-hash or time fails its own visit before it joins a batch;
a Redis failure fails every visit of the batch, each raising the
``StoreError`` it would have raised alone. A visit killed while waiting (a
worker's drain) does not take its peers back: they may still be recorded,
which is what a kill after the send did without batches.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable

from crawler.counters.marks import mark_time
from crawler.counters.names import info_hash_hex
from crawler.errors import StoreError
from crawler.observer import QUIET, Observer
from crawler.store.group_commit import GroupCommit

# Peers per batch (a larger visit goes alone): ~6 ms of Python on a first visit and one or two
# record.lua calls in Redis (module note), short enough for the greenlets waiting on other replies.
# Larger batches share more: against 512 peers (and record calls of half the pairs), a first visit
# cost Redis 0.90 of the CPU and a revisit the worker 0.89 (bench/bench_visit_cost.py, three runs).
MAX_IPS = 1024
# Batches under way at once, each its own greenlet: enough that Redis always has the next batch's
# calls while the worker prepares the one after.
IN_FLIGHT = 6


class Batcher(GroupCommit):
    """Records the visits of the greenlets calling ``record_visit`` together (module note).

    ``recorder``: the process's ``Recorder``; ``max_ips`` and
    ``in_flight``: see ``MAX_IPS`` and ``IN_FLIGHT``. Figures
    (``GroupCommit``): ``batches`` recorded and ``units``, the peers in them.
    """

    def __init__(self, recorder, max_ips: int = MAX_IPS, in_flight: int = IN_FLIGHT,
                 observer: Observer = QUIET):
        super().__init__(self._record, cap=max_ips, in_flight=in_flight, size=lambda visit: max(1, len(visit[1])),
                         stopped=lambda: StoreError("recording peers failed: the batch's greenlet was stopped"))
        self.recorder, self.observer = recorder, observer

    def record_visit(self, info_hash: str, ips: Iterable[str], now: float, probe: bool = True,
                     processed: bool = False) -> int:
        """``Recorder.record_visit``, recorded with whatever other visits are handed over meanwhile
        (the observer is told how long it waited); the batch's visits noted for ``torrents.processed``
        (``processed``) in one round trip after their recording."""
        [answer] = self.record_many([(info_hash, ips, now, probe, processed)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    def record_many(self, visits: list[tuple[str, Iterable[str], float, bool, bool]]) -> list[int | Exception]:
        """``record_visit`` of each of ``visits`` (info-hash, IPs, time, probe, processed), handed over
        at once (a caller visiting a batch of its own): each visit's ``new``, or the exception that
        failed it (a bad info-hash or time fails its own visit only, before anything is sent)."""
        asks: list = []
        out: list = [None] * len(visits)
        for i, (h, ips, now, probe, processed) in enumerate(visits):
            try:
                mark_time(now)  # a time no mark holds is refused here, not in the batch it would fail
                asks.append((i, (info_hash_hex(h), ips if isinstance(ips, Collection) else list(ips), now,
                                 probe, processed)))  # a batch is sized by its peers
            except ValueError as e:
                out[i] = e
        t = time.perf_counter()
        try:
            for (i, _), answer in zip(asks, self.ask_many([a for _, a in asks])):
                out[i] = answer
        finally:
            self.observer.recorded(time.perf_counter() - t)
        return out

    def visited(self, info_hash: str, now: float) -> bool:
        """``Recorder.visited`` (one script call, which the client's round trips already share)."""
        return self.recorder.visited(info_hash, now)

    def visited_many(self, visits: list[tuple[str, float]]) -> list[bool]:
        """``visited`` of each of ``visits`` (info-hash, time): one script call per counter shard and hour."""
        processed = self.recorder.processed
        return processed.visited_many(visits) if processed is not None and visits else [False] * len(visits)

    def _record(self, visits: list) -> list[int]:
        counts = self.recorder.record_visits([(v[0], v[1]) for v in visits], max(v[2] for v in visits),
                                             [v[3] for v in visits])
        noted = [(v[0], v[2]) for v in visits if v[4]]
        if noted and self.recorder.processed is not None:
            self.recorder.processed.visited_many(noted)
        return counts
