"""The completions of many runners made together (group commit of completions).

Strategy. Each visit ends with a completion: its torrent's new score,
cooling or eviction, the per-minute counts. Sent one by one, each would be
a complete.lua call of its own, most of a revisit's Redis time: every call
would check the settings and write its lease, expiry, held score, due time
and per-minute counts with a command each. With
``Completions`` the completions runners make meanwhile go to
``Queue.complete_many`` together: one complete.lua call a shard, which does
each visit's own steps as it would alone and the shard's writes once for all of
them (``crawler/queue/complete.lua``). As in ``crawler.store.coalesce``
there is no timer: a completion waits at most for those already under way,
so a batch is as large as the load makes it.

What stays as it was. Each call is one atomic step: a process killed at any
line leaves every visit of a batch completed or none of them (a visit not
completed is visited again when its lease expires, and its recording, done
before, counts nothing twice). Each visit gets its own answer: a stale lease
or a torrent whose stored values are damaged fails its own visit only. A
round trip that fails (Redis away past its patience) fails every visit in
it, each with the ``StoreError`` it would have had alone.
"""

from __future__ import annotations

from crawler.errors import StoreError
from crawler.queue.queue import MAX_COMPLETIONS, Completion, Queue
from crawler.store.group_commit import GroupCommit

# Batches under way at once: as the coalescer's round trips (``crawler.store.coalesce.IN_FLIGHT``), two
# let one batch be answered while the next is sent.
IN_FLIGHT = 2


class Completions(GroupCommit):
    """Completions of the greenlets calling ``complete``, made together (module note).

    ``queue``: the worker's ``Queue``. Figures (``GroupCommit``): ``batches``,
    the ``Queue.complete_many`` calls made, and ``units``, the visits in them.
    """

    def __init__(self, queue: Queue):
        super().__init__(queue.complete_many, cap=MAX_COMPLETIONS, in_flight=IN_FLIGHT,
                         stopped=lambda: StoreError("completing a visit failed: the completion's greenlet was stopped"))

    def complete(self, visit: Completion) -> tuple[str, float | None]:
        """``Queue.complete``'s answer for ``visit``, completed with those asked meanwhile."""
        answer = self.ask(visit)
        if isinstance(answer, StoreError):
            raise answer
        return answer

    def complete_many(self, visits: list[Completion]) -> list[tuple[str, float | None] | Exception]:
        """``complete``'s answer for each of ``visits`` (a runner's batch, handed over at once), or
        the exception that failed it."""
        return self.ask_many(visits)
