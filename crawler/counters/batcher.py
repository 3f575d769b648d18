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
``crawler.lua.coalesce``: a visit waits at most for the recordings already
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

from collections.abc import Iterable

import gevent
from gevent.event import AsyncResult

from crawler.counters.names import info_hash_hex
from crawler.errors import StoreError

# Visits per batch: ~64 x 50 peers is a few ms of Python, after which the
# greenlets waiting on their replies run.
MAX_VISITS = 64
# Batches under way at once, each its own greenlet: one would make the next
# batch wait for the whole of this one's round trips.
IN_FLIGHT = 2


class Batcher:
    """Records the visits of the greenlets calling ``record_visit`` together (module note).

    ``recorder``: the process's ``Recorder``; ``max_visits`` and
    ``in_flight``: see ``MAX_VISITS`` and ``IN_FLIGHT``. Figures:
    ``batches`` recorded and ``visits`` in them.
    """

    def __init__(self, recorder, max_visits: int = MAX_VISITS, in_flight: int = IN_FLIGHT):
        self.recorder = recorder
        self.max_visits, self.in_flight = max(1, max_visits), max(1, in_flight)
        self._queue: list[tuple[str, Iterable[str], float, AsyncResult]] = []
        self._senders = 0
        self.batches = self.visits = 0

    def record_visit(self, info_hash: str, ips: Iterable[str], now: float) -> int:
        """``Recorder.record_visit``, recorded with whatever other visits are handed over meanwhile."""
        h = info_hash_hex(info_hash)
        if not 0 <= int(now) < 1 << 32:
            raise ValueError(f"time {now!r} does not fit a mark (unix seconds, 32 bits)")
        done = AsyncResult()
        self._queue.append((h, ips, now, done))
        if self._senders < self.in_flight:
            self._senders += 1
            gevent.spawn(self._send)
        return done.get()

    def visited(self, info_hash: str, now: float) -> bool:
        """``Recorder.visited`` (one script call, which the client's round trips already share)."""
        return self.recorder.visited(info_hash, now)

    def _send(self) -> None:
        batch: list = []
        try:
            while self._queue:
                batch, self._queue = self._queue[: self.max_visits], self._queue[self.max_visits :]
                self.batches += 1
                self.visits += len(batch)
                try:
                    news = self.recorder.record_visits([(h, ips) for h, ips, _, _ in batch],
                                                       max(now for _, _, now, _ in batch))
                except Exception as e:  # noqa: BLE001 - each visit raises what it would have alone
                    for *_, done in batch:
                        done.set_exception(e)
                else:
                    for (*_, done), new in zip(batch, news):
                        done.set(new)
                batch = []
        finally:
            self._senders -= 1
            # Killed mid-batch (never by the worker; a test may): no visit waits for ever.
            for *_, done in batch:
                if not done.ready():
                    done.set_exception(StoreError("recording peers failed: the batch's greenlet was stopped"))
            if self._queue and self._senders < self.in_flight:
                self._senders += 1
                gevent.spawn(self._send)
