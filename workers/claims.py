"""The next claims of many runners made together (group commit of claims), and the torrents claimed ahead.

Strategy. A runner that settles a visit claims its next torrent. Sent one by
one, each was a claim.lua call for one torrent: ~60 µs of Redis per visit
(the script's set-up and its housekeeping reads), more than a revisit's
probe. With ``Claims`` the claims runners ask for meanwhile become one claim
of their sum (``Queue.claim``): one call leases the best ready torrents for
all of them, handed out in the order they were asked, so the highest
scores still go first. As in ``crawler.store.coalesce`` there is no timer: a
claim waits at most for the claim already under way, so a batch is as
large as the load makes it.

Claimed ahead. With ``ahead`` (the worker's: ``workers.scrape_ahead``) a
claim also leases up to ``ahead()`` torrents more than its runners asked for
and holds them: the next claims are answered from what is held, oldest
first, and a claim that finds less held than half of ``ahead()`` claims
again in the background (whatever the runners ask meanwhile waits for it,
as it would for any claim under way). What is held is told to
``on_ahead`` as it comes, so its trackers can be scraped in full requests
before its visits. Extra torrents are asked for only after a claim that
brought all it asked: a queue with nothing more ready is not asked again
and again for what it does not have. A lease handed out from what is held is
stamped with the moment it is handed out (``Lease.claimed``: the visit's
round trip in the queue's rates is the visit's, not its wait here). A lease
held longer than ``stale`` seconds (``STALE_SECONDS``, at most a third of
the lease time) is not handed out but goes back to ready: the worker
extends only the leases its runners hold. ``release_held`` hands back
everything held (the worker stopping). A worker killed outright leaves what it held to expire, as it
leaves its runners' leases: the torrents come back with the next claim
anywhere.

What stays as it was. Each runner still reserved its claim in ``Slots``
before asking, so ``--max-visits`` and the pool size hold (what is held is
not visited until a runner reserves it); a claim that brings fewer torrents
than asked leaves the last askers without one (their reservations are
given back, as when the queue is empty). A claim that fails (Redis away
past its patience) answers no torrent to every asker of that batch: the
claim loop claims again once Redis is back. A runner killed while waiting
(a worker's drain) may leave a torrent claimed for it: its lease expires
and the torrent comes back, as when a worker is killed
(``crawler.store.group_commit``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import gevent

from crawler import logs, spawning
from crawler.errors import StoreError
from crawler.queue.queue import MAX_CLAIM, Lease, Queue
from crawler.store.group_commit import GroupCommit

log = logs.get("worker")

# Seconds a lease is held unvisited, at most, before it goes back to ready (and never past a third of
# the lease time: the worker extends the leases its runners hold that often).
STALE_SECONDS = 30.0
# Seconds ``release_held`` waits for a claim under way, whose leases it hands back too (past it, they expire).
RELEASE_WAIT = 5.0


class Claims(GroupCommit):
    """Claims of the greenlets calling ``claim``, made together (module note).

    ``queue``: the worker's ``Queue``; ``outage``: the process's ``Outage``
    (a failed claim is reported to it); ``ahead()``: how many torrents to
    hold claimed ahead (None: none); ``on_ahead(leases)``: told of each
    lease as it is held. Figures (``GroupCommit``): ``batches``, the claims
    sent, and ``units``, the torrents asked for; ``held``: the leases held,
    oldest first, each with the ``time.monotonic()`` it was claimed.
    """

    def __init__(self, queue: Queue, outage=None, ahead: Callable[[], int] | None = None,
                 on_ahead: Callable[[list[Lease]], None] | None = None):
        super().__init__(self._claim, cap=MAX_CLAIM, size=lambda n: n,
                         stopped=lambda: StoreError("claiming torrents failed: the claim's greenlet was stopped"))
        self.queue, self.outage = queue, outage
        self.ahead, self.on_ahead = ahead or (lambda: 0), on_ahead
        self.held: deque[tuple[Lease, float]] = deque()
        self.stale = min(STALE_SECONDS, queue.settings.lease_seconds / 3)
        self._more = True  # the last claim brought all it asked: ask for extra again
        self._released = False  # release_held ran: nothing more is claimed ahead

    def claim(self, n: int) -> list[Lease]:
        """Up to ``n`` leases of the best ready torrents (none when the claim failed)."""
        if n <= 0:
            return []
        self.drop_stale()
        if len(self.held) < n:
            return self.ask(n)
        out = [self._hand_out() for _ in range(n)]
        if self._low():
            spawning.spawn(self.ask, 0)  # refill before it runs dry; askers meanwhile join it
        return out

    def _low(self) -> bool:
        return self._more and not self._released and not self.busy and len(self.held) < self.ahead() // 2

    def refill(self) -> None:
        """Claim ahead now when less than half of ``ahead()`` is held (and the last claim found enough)."""
        if self._low():
            self.ask(0)

    def _hand_out(self) -> Lease:
        lease, _ = self.held.popleft()
        # built rather than dataclasses.replace, which reads the class's fields on every call
        return Lease(lease.info_hash, lease.score, lease.token, time.time(), lease.lane)

    def _claim(self, asks: list[int]) -> list[list[Lease]]:
        """One claim of the sum of ``asks`` (less what is held, plus what to hold), handed out in order."""
        want = sum(asks)
        self.drop_stale()
        mine = [self._hand_out() for _ in range(min(want, len(self.held)))]
        short = want - len(mine)
        extra = min(max(0, self.ahead() - len(self.held)), MAX_CLAIM - short) \
            if self._more and not self._released else 0
        try:
            leases = self.queue.claim(short + extra) if short + extra else []
        except StoreError as e:
            if self.outage is None or not self.outage.failed(e, "claim"):
                log.warning("claim_failed", error=str(e))
            leases = []
        else:
            self._more = len(leases) >= short + extra
        mine += leases[:short]
        kept = leases[short:]
        if kept:
            now = time.monotonic()
            self.held.extend((lease, now) for lease in kept)
            if self.on_ahead is not None:
                self.on_ahead(kept)
        out, at = [], 0
        for n in asks:
            out.append(mine[at : at + n])
            at += n
        return out

    def drop_stale(self) -> None:
        """Held leases past ``stale`` seconds are not handed out: they go back to ready (in the background)."""
        cutoff = time.monotonic() - self.stale
        stale = []
        while self.held and self.held[0][1] < cutoff:
            stale.append(self.held.popleft()[0])
        if stale:
            spawning.spawn(self._release, stale)

    def _release(self, leases: list[Lease]) -> int:
        """Hand ``leases`` back to ready; how many could not be (their leases expire instead)."""
        failed = 0
        for lease in leases:
            try:
                self.queue.release(lease)
            except StoreError:
                failed += 1
        if failed:
            log.warning("hand_back_failed", torrents=failed, note="their leases expire and they come back then")
        return failed

    def release_held(self) -> None:
        """Hand back every lease held (the worker stops): nothing more is claimed ahead, and a claim
        under way is waited for (at most ``RELEASE_WAIT`` seconds), so the leases it brings are handed
        back too rather than held past the stop. A lease that cannot be handed back expires."""
        self._released = True
        end = time.monotonic() + RELEASE_WAIT
        while self.busy and time.monotonic() < end:
            gevent.sleep(0.02)
        held = [lease for lease, _ in self.held]
        self.held.clear()
        self._release(held)
