"""Script calls of many greenlets sent in shared round trips (group commit).

Strategy. A worker process runs dozens of visits at once, and each visit's
Redis steps (plan, probe, completion, next claim) are short script calls.
Sent alone, each costs a round trip: ~100 µs of redis-py and gevent work in
the worker (the profile in bench/results/2026-11-24-bench_worker.md) and a
read, parse and write in Redis, which for a revisit is more than the
scripts' own work.
With a ``Coalescer`` in a process's ``Store``, ``Store.run`` queues a greenlet's
calls and parks the greenlet; one sender greenlet sends everything queued
in one pipeline (at most ``MAX_CALLS`` calls), hands each caller its
replies, and at once sends what queued meanwhile; ``IN_FLIGHT`` senders
may each have a round trip under way. There is no timer: a call waits at
most for the round trips already in flight, so a batch is as large as the
load makes it (a lone call when the worker is idle, dozens when it is
busy), and nothing waits for a batch to fill (``crawler.store.group_commit``).
A recording's record and place calls are not among them: the recording
batches (``crawler.counters.batcher``) gather many visits already, and
those calls, each milliseconds of Redis, go in round trips of their own
(``Store.run``'s ``own``), so a completion never waits behind them (in
shared round trips they made a first visit's recording stage twice as
long).

What stays as it was. Every call is still its own atomic script with all its
keys in one slot, so a process killed at any line leaves each call done or
not done, as before: batching changes round trips, not steps. A script's
error reply fails its own caller only; a round trip that fails (connection,
an outage past its patience) fails every caller in it, each of which sees
the ``redis.RedisError`` it would have seen alone, and every call queued
behind it: those waited through the same outage, and a call waits no longer
than ``PEERCRAWL_REDIS_WAIT_SECONDS`` plus the round trip it queued behind. ``WAIT``: a batch holding
a call made with a ``Wait`` ends with one ``WAIT`` covering the whole batch.
A caller inside ``outage.Once`` (tried once, not waited for) is sent on its
own, at once, in its own greenlet.

A caller killed while waiting (a worker's drain) does not take its calls
back: they may still run, which is what a kill after the send would do
without batching (a completion answers "stale" for a lease handed back
meanwhile; a recording counts what was not counted).
"""

from __future__ import annotations

import redis

from crawler.store.group_commit import GroupCommit
from crawler.store.outage import nested

# Calls per round trip: ~256 visits' probes are ~13,000 keys, a few ms of
# Redis, after which other clients' commands run.
MAX_CALLS = 256
# Round trips in flight at once, each its own sender greenlet and connection.
# One would make the worker and Redis take turns (Redis idle while the worker
# handles a batch's replies, the worker idle while Redis runs the next); two
# let them overlap.
IN_FLIGHT = 2


class Coalescer(GroupCommit):
    """Shares round trips among the greenlets calling ``run`` (module note).

    ``client``: the redis-py client (single node or cluster) the calls go
    to; ``max_calls`` and ``in_flight``: see ``MAX_CALLS`` and
    ``IN_FLIGHT``. Figures (``GroupCommit``): ``batches``, the round trips
    sent, and ``units``, the calls in them.
    """

    def __init__(self, client: redis.Redis, max_calls: int = MAX_CALLS, in_flight: int = IN_FLIGHT):
        super().__init__(self._round_trip, cap=max_calls, in_flight=in_flight,
                         size=lambda request: len(request[0]), fail_queued=True,
                         stopped=lambda: redis.ConnectionError("the round trip's sender was stopped"))
        self.client = client

    def run(self, calls: list, wait=None) -> list:
        """The replies of ``calls`` (``(script, keys, args)``), errors as values (``scripts.replies_of``).

        Blocks this greenlet until the round trip holding them is answered;
        raises ``redis.RedisError`` if that round trip failed.
        """
        from crawler.store.scripts import replies_of

        if nested() or not calls:
            return replies_of(self.client, calls, wait) if calls else []
        return self.ask((calls, wait))

    def _round_trip(self, requests: list) -> list:
        """One pipeline of every request's calls (a ``WAIT`` if any asked for one); each its replies."""
        from crawler.store.scripts import replies_of

        calls = [c for own, _ in requests for c in own]
        replies = replies_of(self.client, calls, next((w for _, w in requests if w is not None), None))
        out, at = [], 0
        for own, _ in requests:
            out.append(replies[at : at + len(own)])
            at += len(own)
        return out
