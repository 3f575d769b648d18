"""The pool's runners: greenlets visiting a batch of torrents at a time.

Strategy. The claim loop (``workers.worker``) hands each claim's leases to
``Runners.start``, a runner per ``BATCH`` of them, each lease in a slot of
its own (``Slot``, counted in ``workers.slots``). A runner visits its batch
together (``Visitor.visit_many``) and, as it completes it, claims the next
torrents for the slots that go on (``Slots.reserve``), together with the
other runners completing then (``workers.claims``). A slot leaves its runner
when the queue has nothing ready for it, when the pool is above its target
or when the worker stops; a runner ends when its batch is empty.

The visits a batch's cut leaves behind (``workers.scrape_seats``,
``workers.announcing``: not answered once half the batch was and as long
again had passed) go on in a runner
of their own, their slots with them, so the rest settle and claim again
without waiting for a lost datagram or a long lookup.

Ends. A visit that ended alone (a refused completion, a failed recording)
is told to ``ended`` as its exception; a Redis step the batch shares that
gave up ends the runner (the leases expire, the torrents come back); a bug
ends it too, noted on each torrent for the quarantine. A runner killed (the
worker's drain) hands its torrents back (``Queue.release``), as does one
whose claim came back as the stop came.
"""

from __future__ import annotations

from collections.abc import Callable

import gevent

from crawler import logs, spawning
from crawler.errors import StoreError
from crawler.queue.queue import Lease, Queue
from crawler.store.outage import Outage
from workers.slots import CLAIM, Slots
from workers.visit import Visit, Visitor

log = logs.get("worker")

# Leases a runner visits together (``Visitor.visit_many``), at most.
BATCH = 16


class Slot:
    """One slot of the pool: the runner greenlet holding it (a runner holds a batch of them)."""

    __slots__ = ("runner",)

    def __init__(self, runner: gevent.Greenlet):
        self.runner = runner


class Runners:
    """The runners of one worker's pool (module note).

    ``slots``: the pool's ``Slots``; ``visitor``: its ``Visitor``;
    ``claiming()``: whether the worker still claims; ``stopping()``: whether
    a stop was asked (a torrent claimed from then on is handed back);
    ``ended(visit)``: told of each visit settled; ``freed()``: told when a
    runner ends (its slots are free).
    """

    def __init__(self, slots: Slots, visitor: Visitor, queue: Queue, outage: Outage, *,
                 claiming: Callable[[], bool], stopping: Callable[[], bool], ended: Callable[[Visit], None],
                 freed: Callable[[], None]):
        self.slots, self.visitor, self.queue, self.outage = slots, visitor, queue, outage
        self.claiming, self.stopping, self.ended, self.freed = claiming, stopping, ended, freed

    def start(self, leases: list[Lease]) -> None:
        """A runner for each ``BATCH`` of ``leases``, each lease in a slot of its own."""
        for at in range(0, len(leases), BATCH):
            batch: list = []
            g = spawning.greenlet(self._run, batch)
            for lease in leases[at:at + BATCH]:
                slot = Slot(g)
                self.slots.start(slot, lease)
                batch.append((slot, lease))
            g.start()

    def greenlets(self) -> list[gevent.Greenlet]:
        """The runners holding a slot."""
        return list({slot.runner for slot in self.slots.held})

    def _run(self, batch: list[tuple[Slot, Lease]], finish: Callable | None = None) -> None:
        """Visit ``batch`` (each lease in its slot; ``finish``: the rest of a batch whose cut left these
        behind), then go on with the torrents claimed at its completion, until none."""
        held = [slot for slot, _ in batch]
        try:
            while batch:
                for slot, lease in batch:
                    self.slots.hold(slot, lease)
                reserved: list[Slot] = []
                visited = list(batch)
                done = self._visit(batch, held, reserved, finish)
                finish = None
                if done is None:
                    return
                visits, nxt = done
                batch = self.slots.settled(held, reserved, nxt)
                held = [slot for slot, _ in batch]
                if batch and self.stopping():
                    # claimed just as the stop came; a claim reserved before a normal end
                    # (--max-visits, --duration) is visited: it counted against the limit
                    for _, lease in batch:
                        self.hand_back(lease)
                    batch = []
                for v, (_, lease) in zip(visits, visited):
                    if v is not None:  # None: gone on apart
                        self._ended(v, lease)
        finally:
            for slot in held:
                self.slots.release(slot)
            self.freed()

    def _visit(self, batch: list[tuple[Slot, Lease]], held: list[Slot], reserved: list[Slot], finish: Callable | None
               ) -> tuple[list[Visit | Exception | None], list[Lease]] | None:
        """One batch's visits and the claim at their completion (the slots that claim again into
        ``reserved``); the visits a cut leaves behind go on in a runner of their own, out of ``batch``
        and ``held``. None when the runner must end."""
        leases = [lease for _, lease in batch]

        def claim(_: int) -> int:
            claiming = self.claiming()
            reserved.extend(slot for slot, _ in batch if self.slots.reserve(slot, claiming) == CLAIM)
            return len(reserved)

        def split(positions: list[int], rest: Callable) -> None:
            part = [batch[p] for p in positions]
            apart = {slot for slot, _ in part}
            batch[:] = [x for x in batch if x[0] not in apart]
            held[:] = [slot for slot in held if slot not in apart]
            g = spawning.greenlet(self._run, part, rest)
            for slot in apart:
                slot.runner = g
            g.start()

        try:
            return finish(claim) if finish is not None else self.visitor.visit_many(leases, claim, split)
        except StoreError as e:
            # The leases expire and the torrents come back; nothing is lost.
            if not self.outage.failed(e, "visit"):
                log.warning("visit_store_error", info_hash=leases[0].info_hash, visits=len(leases), error=str(e))
        except gevent.GreenletExit:
            for _, lease in batch:
                self.hand_back(lease)
            raise
        except Exception as e:  # a bug must not kill the pool; the leases expire
            for _, lease in batch:
                self._ended(e, lease)
        return None

    def _ended(self, v: Visit | Exception, lease: Lease) -> None:
        """A visit of a batch ended: counted, or what ended it alone said (its lease expires)."""
        if isinstance(v, Visit):
            self.ended(v)
        elif isinstance(v, StoreError):
            if not self.outage.failed(v, "visit"):
                log.warning("visit_store_error", info_hash=lease.info_hash, error=str(v))
        else:  # a bug
            log.error("visit_crashed", info_hash=lease.info_hash, exc_info=v)
            try:  # kept on the torrent: quarantine, if it comes to that, shows why
                self.queue.note_error(lease.info_hash, f"visit crashed: {type(v).__name__}: {v}")
            except StoreError:
                pass

    def hand_back(self, lease: Lease) -> None:
        """``lease``'s torrent back to ready (2 s at most; else its lease expires)."""
        try:
            with gevent.Timeout(2.0):
                self.queue.release(lease)
        except (StoreError, gevent.Timeout):
            pass  # the lease expires instead
