"""The recordings of many visits made together (group commit of visits).

Strategy. A worker runs dozens of visits at once, each in its own greenlet,
and each recording used to cost that greenlet its own probe, its own place
calls (crawls of several counter shards) and its own record calls, with
every IP parsed, located and fingerprinted in the middle of other visits'
work. With a ``Batcher`` a visit's greenlet hands its peers over and
parks; one recording greenlet takes every visit handed over meanwhile (at
most ``MAX_VISITS``) and records them with one ``Recorder.record_visits``:
each distinct IP parsed and located once, every probe in one round trip,
then every place call (one per counter shard, an IP and place met in
several visits sent once) and every record call. There is no timer, as in
``crawler.store.coalesce``: a visit waits at most for the recordings already
under way (``IN_FLIGHT``), so a batch is as large as the load makes it and
nothing waits for a batch to fill.

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
from collections.abc import Iterable

from crawler.counters.names import info_hash_hex
from crawler.errors import StoreError
from crawler.observer import QUIET, Observer
from crawler.store.group_commit import GroupCommit

# Visits per batch: ~64 x 50 peers is a few ms of Python, after which the
# greenlets waiting on their replies run.
MAX_VISITS = 64
# Batches under way at once, each its own greenlet: one would make the next
# batch wait for the whole of this one's round trips.
IN_FLIGHT = 2


class Batcher(GroupCommit):
    """Records the visits of the greenlets calling ``record_visit`` together (module note).

    ``recorder``: the process's ``Recorder``; ``max_visits`` and
    ``in_flight``: see ``MAX_VISITS`` and ``IN_FLIGHT``. Figures
    (``GroupCommit``): ``batches`` recorded and ``units``, the visits in them.
    """

    def __init__(self, recorder, max_visits: int = MAX_VISITS, in_flight: int = IN_FLIGHT,
                 observer: Observer = QUIET):
        super().__init__(self._record, cap=max_visits, in_flight=in_flight,
                         stopped=lambda: StoreError("recording peers failed: the batch's greenlet was stopped"))
        self.recorder, self.observer = recorder, observer

    def record_visit(self, info_hash: str, ips: Iterable[str], now: float, probe: bool = True) -> int:
        """``Recorder.record_visit``, recorded with whatever other visits are handed over meanwhile
        (the observer is told how long it waited)."""
        h = info_hash_hex(info_hash)
        if not 0 <= int(now) < 1 << 32:
            raise ValueError(f"time {now!r} does not fit a mark (unix seconds, 32 bits)")
        t = time.perf_counter()
        try:
            return self.ask((h, ips, now, probe))
        finally:
            self.observer.recorded(time.perf_counter() - t)

    def visited(self, info_hash: str, now: float) -> bool:
        """``Recorder.visited`` (one script call, which the client's round trips already share)."""
        return self.recorder.visited(info_hash, now)

    def _record(self, visits: list) -> list[int]:
        return self.recorder.record_visits([(h, ips) for h, ips, _, _ in visits], max(v[2] for v in visits),
                                           [probe for *_, probe in visits])
