"""Script calls of many greenlets sent in shared round trips (group commit).

Strategy. A worker process runs dozens of visits at once, and each visit's
Redis steps (plan, probe, record, completion with the next claim) are short
script calls. Sent alone, each costs a round trip: ~100 µs of redis-py and
gevent work in the worker (the profile in docs/worker.md) and a read, parse
and write in Redis, which for a revisit is more than the scripts' own work.
With a ``Coalescer`` on its client, ``run_pipelined`` queues a greenlet's
calls and parks the greenlet; one sender greenlet sends everything queued
in one pipeline (at most ``MAX_CALLS`` calls), hands each caller its
replies, and at once sends what queued meanwhile; ``IN_FLIGHT`` senders
may each have a round trip under way. There is no timer: a call waits at
most for the round trips already in flight, so a batch is as large as the
load makes it (a lone call when the worker is idle, dozens when it is
busy), and nothing waits for a batch to fill.

What stays as it was. Every call is still its own atomic script with all its
keys in one slot, so a process killed at any line leaves each call done or
not done, as before: batching changes round trips, not steps. A script's
error reply fails its own caller only; a round trip that fails (connection,
an outage past its patience) fails every caller in it, each of which sees
the ``redis.RedisError`` it would have seen alone, and every call queued
behind it: those waited through the same outage, and a call waits no longer
than ``PEERCRAWL_REDIS_WAIT_SECONDS`` plus the round trip it queued behind. ``WAIT``: a batch holding
a call made with a ``Wait`` ends with one ``WAIT`` covering the whole batch.
A caller inside ``outage.once`` (tried once, not waited for) is sent on its
own, at once, in its own greenlet.

A caller killed while waiting (a worker's drain) does not take its calls
back: they may still run, which is what a kill after the send would do
without batching (a completion answers "stale" for a lease handed back
meanwhile; a recording counts what was not counted).
"""

from __future__ import annotations

from collections import deque

import gevent
import redis
from gevent.event import AsyncResult

from crawler.outage import nested

# Calls per round trip: ~256 visits' probes are ~13,000 keys, a few ms of
# Redis, after which other clients' commands run.
MAX_CALLS = 256
# Round trips in flight at once, each its own sender greenlet and connection.
# One would make the worker and Redis take turns (Redis idle while the worker
# handles a batch's replies, the worker idle while Redis runs the next); two
# let them overlap.
IN_FLIGHT = 2


class Coalescer:
    """Shares round trips among the greenlets calling ``run`` (module note).

    ``client``: the redis-py client (single node or cluster) the calls go
    to; ``max_calls`` and ``in_flight``: see ``MAX_CALLS`` and
    ``IN_FLIGHT``. Figures: ``round_trips`` sent and ``calls`` in them.
    """

    def __init__(self, client: redis.Redis, max_calls: int = MAX_CALLS, in_flight: int = IN_FLIGHT):
        self.client = client
        self.max_calls = max(1, max_calls)
        self.in_flight = max(1, in_flight)
        self._queue: deque[tuple[list, object, AsyncResult]] = deque()
        self._senders = 0
        self.round_trips = 0
        self.calls = 0

    def run(self, calls: list, wait=None) -> list:
        """The replies of ``calls`` (``(script, keys, args)``), errors as values (``lua.replies_of``).

        Blocks this greenlet until the round trip holding them is answered;
        raises ``redis.RedisError`` if that round trip failed.
        """
        from crawler.lua import replies_of

        if nested() or not calls:
            return replies_of(self.client, calls, wait) if calls else []
        done = AsyncResult()
        self._queue.append((calls, wait, done))
        if self._senders < self.in_flight:
            self._senders += 1
            gevent.spawn(self._send)
        return done.get()

    def _take(self) -> list[tuple[list, object, AsyncResult]]:
        """The queued requests of the next round trip: whole requests, at most ``max_calls`` calls
        (a larger request goes alone)."""
        taken, n = [], 0
        q = self._queue
        while q and (not taken or n + len(q[0][0]) <= self.max_calls):
            item = q.popleft()
            taken.append(item)
            n += len(item[0])
        return taken

    def _send(self) -> None:
        from crawler.lua import replies_of

        taken: list = []
        try:
            while self._queue:
                taken = self._take()
                calls = [c for item in taken for c in item[0]]
                wait = next((w for _, w, _ in taken if w is not None), None)
                self.round_trips += 1
                self.calls += len(calls)
                try:
                    replies = replies_of(self.client, calls, wait)
                except Exception as e:  # noqa: BLE001 - each caller raises what it would have alone
                    # The calls queued meanwhile waited through the same outage: they
                    # fail with it rather than start a patience of their own.
                    while self._queue:
                        taken.append(self._queue.popleft())
                    for _, _, done in taken:
                        done.set_exception(e)
                    taken = []
                    continue
                at = 0
                for own, _, done in taken:
                    done.set(replies[at : at + len(own)])
                    at += len(own)
                taken = []
        finally:
            self._senders -= 1
            # Killed mid-send (never by the worker; a test may): no caller waits for ever.
            for _, _, done in taken:
                if not done.ready():
                    done.set_exception(redis.ConnectionError("the round trip's sender was stopped"))
            if self._queue and self._senders < self.in_flight:
                self._senders += 1
                gevent.spawn(self._send)


def coalesce(client: redis.Redis, max_calls: int = MAX_CALLS) -> Coalescer:
    """Give ``client`` a ``Coalescer`` (kept as ``client.coalescer``): from now on every
    ``run_pipelined`` on it shares round trips. For a worker process's own client."""
    existing = getattr(client, "coalescer", None)
    if existing is not None:
        return existing
    client.coalescer = Coalescer(client, max_calls)
    return client.coalescer
