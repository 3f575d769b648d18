"""The pool's slots: which runner holds which lease, and who may claim next.

Strategy. The claim loop fills free slots with new runners; a runner that
finishes a visit claims its own next torrent as it completes it (with the
other runners then, ``workers.claims``). Both count against one budget:
``target`` runners at a time and, with ``--max-visits``, ``limit`` claims in
all. A runner's next claim is reserved (counted in ``claimed``) before it is
sent, so two
runners completing together cannot both take the last visit; a reservation
that brings nothing back is given back. A runner told not to claim again
(the pool shrank, the limit is reached, the worker stops) is *leaving*: it
still holds its slot until it ends, but the claim loop may already fill it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

from crawler.queue.queue import Lease

# A runner: anything hashable (a worker's are its greenlets).
R = TypeVar("R", bound=Hashable)

# What ``reserve`` answered a runner: claim one next torrent, or leave.
CLAIM, LEAVE = 1, 0


class Slots(Generic[R]):
    """Bookkeeping of one worker's runners (plain counts: no I/O, no greenlets of its own).

    ``target``: the runners wanted at a time (the autoscaler sets it);
    ``limit``: the most claims in all (None: no limit). ``held``: each running
    runner and the lease it holds. ``claimed``: claims made, a reserved claim
    counting from ``reserve`` until its answer. ``leaving``: runners that will
    not claim again, not counted against ``target``.

    A runner's part: ``hold(runner, lease)`` as each visit starts;
    ``reserve(runner, claiming)`` as the visit completes (``CLAIM`` or
    ``LEAVE``); ``answered(runner, leases)`` with what the claim brought;
    ``release(runner)`` when it ends, however it ends. The claim loop's part:
    ``free()``, then ``start(runner, lease)`` for each lease it claimed.
    """

    def __init__(self, target: int, limit: int | None = None):
        self.target, self.limit = target, limit
        self.held: dict[R, Lease] = {}
        self.claimed = 0
        self.leaving = 0
        self._asked: dict[R, int] = {}  # reserve's answer for the runner's current visit

    @property
    def running(self) -> int:
        """Runners holding a torrent."""
        return len(self.held)

    def exhausted(self) -> bool:
        """True once ``limit`` claims were made."""
        return self.limit is not None and self.claimed >= self.limit

    def free(self) -> int:
        """How many torrents the claim loop may claim now (0 or less: none)."""
        free = self.target - (len(self.held) - self.leaving)
        if self.limit is not None:
            free = min(free, self.limit - self.claimed)
        return free

    def start(self, runner: R, lease: Lease) -> None:
        """A runner started by the claim loop for ``lease`` (one claim)."""
        self.claimed += 1
        self.held[runner] = lease

    def hold(self, runner: R, lease: Lease) -> None:
        """``runner`` starts visiting ``lease``."""
        self.held[runner] = lease
        self._asked.pop(runner, None)

    def reserve(self, runner: R, claiming: bool = True) -> int:
        """``CLAIM`` (one claim reserved) if ``runner`` should claim its next torrent, else ``LEAVE``.

        ``LEAVE`` when the worker no longer claims (``claiming`` False), when
        the pool is above ``target`` (this runner leaves) or at ``limit``.
        """
        if not claiming or len(self.held) - self.leaving > self.target or self.exhausted():
            self._asked[runner] = LEAVE
            self.leaving += 1
            return LEAVE
        self._asked[runner] = CLAIM
        self.claimed += 1
        return CLAIM

    def answered(self, runner: R, leases: Sequence[Lease]) -> None:
        """The claim ``runner`` reserved brought ``leases``; none: the reservation is given back."""
        if self._asked.get(runner) == CLAIM and not leases:
            self.claimed -= 1
            del self._asked[runner]

    def settled(self, held: Sequence[R], reserved: Sequence[R], leases: Sequence[Lease]) -> list[tuple[R, Lease]]:
        """A batch of runners (one greenlet's slots, ``held``) settled: ``reserved``, those that reserved a
        claim, in order, and ``leases``, what the claim brought. The runners that leave, and those the
        claim brought nothing, are released; returns the next batch, each runner with its lease."""
        claiming = set(reserved)
        for runner in held:
            if runner not in claiming:
                self.release(runner)  # leaving: its slot is the claim loop's to fill
        for runner in reserved[len(leases):]:
            self.answered(runner, [])
            self.release(runner)
        batch = list(zip(reserved, leases))
        for runner, lease in batch:
            self.answered(runner, [lease])
        return batch

    def release(self, runner: R) -> None:
        """``runner`` ended: its slot is free; a claim it reserved and never visited is given back."""
        asked = self._asked.pop(runner, None)
        if asked == LEAVE:
            self.leaving -= 1
        elif asked == CLAIM:
            self.claimed -= 1
        self.held.pop(runner, None)
