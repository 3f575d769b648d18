"""The next claims of many runners made together (group commit of claims).

Strategy. A runner that settles a visit claims its next torrent. Sent one by
one, each was a claim.lua call for one torrent: ~60 µs of Redis per visit
(the script's set-up and its housekeeping reads), more than a revisit's
probe. With ``Claims`` the claims runners ask for meanwhile become one claim
of their sum (``Queue.claim``): one call leases the best ready torrents for
all of them, handed out in the order they were asked, so the highest
scores still go first. As in ``crawler.store.coalesce`` there is no timer: a
claim waits at most for the claim already under way, so a batch is as
large as the load makes it.

What stays as it was. Each runner still reserved its claim in ``Slots``
before asking, so ``--max-visits`` and the pool size hold; a claim that
brings fewer torrents than asked leaves the last askers without one (their
reservations are given back, as when the queue is empty). A claim that
fails (Redis away past its patience) answers no torrent to every asker of
that batch: the claim loop claims again once Redis is back. A runner killed
while waiting (a worker's drain) may leave a torrent claimed for it: its
lease expires and the torrent comes back, as when a worker is killed
(``crawler.store.group_commit``).
"""

from __future__ import annotations

from crawler import logs
from crawler.errors import StoreError
from crawler.queue.transitions import MAX_CLAIM, Lease, Queue
from crawler.store.group_commit import GroupCommit

log = logs.get("worker")


class Claims(GroupCommit):
    """Claims of the greenlets calling ``claim``, made together (module note).

    ``queue``: the worker's ``Queue``; ``outage``: the process's ``Outage``
    (a failed claim is reported to it). Figures (``GroupCommit``):
    ``batches``, the claims sent, and ``units``, the torrents asked for.
    """

    def __init__(self, queue: Queue, outage=None):
        super().__init__(self._claim, cap=MAX_CLAIM, size=lambda n: n,
                         stopped=lambda: StoreError("claiming torrents failed: the claim's greenlet was stopped"))
        self.queue, self.outage = queue, outage

    def claim(self, n: int) -> list[Lease]:
        """Up to ``n`` leases of the best ready torrents (none when the claim failed)."""
        return self.ask(n) if n > 0 else []

    def _claim(self, asks: list[int]) -> list[list[Lease]]:
        """One claim of the sum of ``asks``, handed out in their order."""
        try:
            leases = self.queue.claim(sum(asks))
        except StoreError as e:
            if self.outage is None or not self.outage.failed(e, "claim"):
                log.warning("claim_failed", error=str(e))
            leases = []
        out, at = [], 0
        for n in asks:
            out.append(leases[at : at + n])
            at += n
        return out
