"""The next claims of many runners made together (group commit of claims).

Strategy. A runner that settles a visit claims its next torrent. Sent one by
one, each was a claim.lua call for one torrent: ~60 µs of Redis per visit
(the script's set-up and its housekeeping reads), more than a revisit's
probe. With ``Claims`` the claims runners ask for meanwhile become one claim
of their sum (``Queue.claim``): one call leases the best ready torrents for
all of them, handed out in the order they were asked, so the highest
scores still go first. As in ``crawler.lua.coalesce`` there is no timer: a
claim waits at most for the claim already under way, so a batch is as
large as the load makes it.

What stays as it was. Each runner still reserved its claim in ``Slots``
before asking, so ``--max-visits`` and the pool size hold; a claim that
brings fewer torrents than asked leaves the last askers without one (their
reservations are given back, as when the queue is empty). A claim that
fails (Redis away past its patience) answers no torrent to every asker of
that batch: the claim loop claims again once Redis is back. A runner killed
while waiting (a worker's drain) may leave a torrent claimed for it: its
lease expires and the torrent comes back, as when a worker is killed.
"""

from __future__ import annotations

import gevent
from gevent.event import AsyncResult

from crawler import logs
from crawler.errors import StoreError
from crawler.lifecycle import MAX_CLAIM, Lease, Queue

log = logs.get("worker")


class Claims:
    """Claims of the greenlets calling ``claim``, made together (module note).

    ``queue``: the worker's ``Queue``; ``outage``: the process's ``Outage``
    (a failed claim is reported to it). Figures: ``batches`` sent and
    ``asked`` in them.
    """

    def __init__(self, queue: Queue, outage=None):
        self.queue, self.outage = queue, outage
        self._queue: list[tuple[int, AsyncResult]] = []
        self._sending = False
        self.batches = self.asked = 0

    def claim(self, n: int) -> list[Lease]:
        """Up to ``n`` leases of the best ready torrents (none when the claim failed)."""
        if n <= 0:
            return []
        done = AsyncResult()
        self._queue.append((n, done))
        if not self._sending:
            self._sending = True
            gevent.spawn(self._send)
        return done.get()

    def _take(self) -> list[tuple[int, AsyncResult]]:
        """The askers of the next claim: whole requests, at most ``MAX_CLAIM`` torrents (a larger one alone)."""
        taken, total = [], 0
        while self._queue and (not taken or total + self._queue[0][0] <= MAX_CLAIM):
            item = self._queue.pop(0)
            taken.append(item)
            total += item[0]
        return taken

    def _send(self) -> None:
        taken: list = []
        try:
            while self._queue:
                taken = self._take()
                self.batches += 1
                self.asked += len(taken)
                try:
                    leases = self.queue.claim(sum(n for n, _ in taken))
                except StoreError as e:
                    if self.outage is None or not self.outage.failed(e, "claim"):
                        log.warning("claim_failed", error=str(e))
                    leases = []
                at = 0
                for n, done in taken:
                    done.set(leases[at : at + n])
                    at += n
                taken = []
        finally:
            self._sending = False
            # Killed mid-claim (never by the worker; a test may): no runner waits for ever.
            for _, done in taken:
                if not done.ready():
                    done.set([])
            if self._queue:
                self._sending = True
                gevent.spawn(self._send)
