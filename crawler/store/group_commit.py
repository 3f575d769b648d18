"""Requests of many greenlets answered in shared batches (group commit).

Strategy. A greenlet calls ``ask(request)`` (or ``ask_many``, a batch of its
own) and parks. A sender greenlet takes every request queued meanwhile
(whole requests, at most ``cap`` units of ``size``; a larger request goes
alone), answers them with one ``serve(requests)`` call, hands each asker its
answer, and at once takes what queued meanwhile; up to ``in_flight`` senders
may each have a batch under way. There is no timer: a request waits at most
for the batches already under way, so a batch is as large as the load makes
it (a lone request when the process is idle, dozens when it is busy), and
nothing waits for a batch to fill. A sender with nothing left to take parks
until the next request wakes it: starting a greenlet (~13 µs, its Python
stack mapped and unmapped) cost more than the batch it sent when a worker's
batches hold a handful of requests, and a worker sends about one a visit.

Failures. An exception ``serve`` raises is raised by every asker of that
batch (with ``fail_queued``, also by every request queued meanwhile: they
waited through the same failure). A sender killed mid-batch (never in a
worker; a test may) raises ``stopped()`` in its askers, so nobody waits
for ever; one killed while parked just leaves (the next request starts
another). An asker killed while waiting does not take its request back: it
may still be served, as a kill after the send would have had it.

Used for the worker's script calls (``crawler.store.coalesce``), its visits'
recordings (``crawler.counters.batcher``), its runners' next claims
(``workers.claims``) and their completions (``workers.completions``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from gevent.event import AsyncResult, Event

from crawler import spawning


class GroupCommit:
    """Serves the requests of the greenlets calling ``ask`` in shared batches (module note).

    ``serve(requests) -> answers`` (one per request, in order); ``cap``:
    units per batch, ``size(request)`` units each (default 1);
    ``in_flight``: batches under way at once; ``fail_queued``: a failed batch
    fails the requests queued meanwhile too; ``stopped()``: the exception
    for askers whose sender was killed. Figures: ``batches`` served and
    ``units`` in them.
    """

    def __init__(self, serve: Callable[[list], list], *, cap: int, in_flight: int = 1,
                 size: Callable[[Any], int] | None = None, fail_queued: bool = False,
                 stopped: Callable[[], BaseException]):
        self.serve, self.size, self.stopped = serve, size or (lambda _: 1), stopped
        self.cap, self.in_flight, self.fail_queued = max(1, cap), max(1, in_flight), fail_queued
        self._queue: deque[tuple[object, AsyncResult]] = deque()
        self._senders = 0  # sender greenlets alive, parked ones included
        self._parked: list[Event] = []  # what wakes each parked sender
        self.batches = self.units = 0

    @property
    def busy(self) -> bool:
        """A batch is under way or a request waits."""
        return self._senders > len(self._parked) or bool(self._queue)

    def ask(self, request):
        """The answer to ``request``, served with whatever else is asked meanwhile."""
        done: AsyncResult = AsyncResult()
        self._queue.append((request, done))
        self._wake(1)
        return done.get()

    def ask_many(self, requests: list) -> list:
        """The answer to each of ``requests`` (a caller with a batch of its own: one park for all of
        them), served as ``ask`` serves one; a request whose batch failed has the exception it
        would have raised as its answer."""
        waits: list[AsyncResult] = []
        for request in requests:
            done: AsyncResult = AsyncResult()
            self._queue.append((request, done))
            waits.append(done)
        self._wake(-(-sum(map(self.size, requests)) // self.cap))  # a sender for each batch they fill
        out = []
        for done in waits:
            done.wait()
            out.append(done.value if done.successful() else done.exception)
        return out

    def _wake(self, need: int) -> None:
        """Up to ``need`` senders for what is queued: parked ones woken first, then new ones started, as
        far as ``in_flight`` allows."""
        while need > 0 and self._parked:
            self._parked.pop().set()
            need -= 1
        while need > 0 and self._senders < self.in_flight:
            self._senders += 1
            need -= 1
            spawning.spawn(self._send)

    def _take(self) -> list[tuple[object, AsyncResult]]:
        """The next batch: whole requests, at most ``cap`` units (a larger request goes alone)."""
        taken: list[tuple[object, AsyncResult]] = []
        n = 0
        q, size = self._queue, self.size
        while q and (not taken or n + size(q[0][0]) <= self.cap):
            item = q.popleft()
            taken.append(item)
            n += size(item[0])
        self.units += n
        return taken

    def _send(self) -> None:
        taken: list = []
        wake = Event()
        try:
            while True:
                while self._queue:
                    taken = self._take()
                    self._answer(taken)
                    taken = []
                # parked until a request comes (``_wake`` takes it off the list as it wakes it)
                wake.clear()
                self._parked.append(wake)
                wake.wait()
        finally:
            self._ended(wake, taken)

    def _answer(self, taken: list) -> None:
        """Serve one batch and hand each asker its answer (with ``fail_queued``, a failure also to
        every request queued meanwhile, added to ``taken``)."""
        self.batches += 1
        try:
            answers = self.serve([r for r, _ in taken])
        except Exception as e:  # noqa: BLE001 - each asker raises what it would have alone
            while self.fail_queued and self._queue:
                taken.append(self._queue.popleft())
            for _, done in taken:
                done.set_exception(e)
        else:
            for (_, done), answer in zip(taken, answers):
                done.set(answer)

    def _ended(self, wake: Event, taken: list) -> None:
        """A sender ends (killed): its batch's askers get ``stopped()``, and the queue another sender."""
        if wake in self._parked:  # killed while parked
            self._parked.remove(wake)
        self._senders -= 1
        for _, done in taken:
            if not done.ready():
                done.set_exception(self.stopped())
        if self._queue:
            self._wake(1)
