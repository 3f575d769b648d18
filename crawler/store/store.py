"""``Store``: a Redis client and what a process keeps beside it to run scripts.

The rooms that write through scripts (the queue, the counters, the StatHat
outbox) are handed a ``Store`` and run their calls with ``Store.run``. What
it carries is the process's choice, not the client's: a worker's store has
a ``Coalescer`` (its visits' calls share round trips, ``coalesce``), a
command's store has none (each call is its own round trip, ``scripts.
run_pipelined``). redis-py's client is left as redis-py made it.

``Store.of`` takes a store or a bare client (one without a coalescer), so
a room can be built from either: commands and tests hand a client, the
worker process its store.
"""

from __future__ import annotations

import redis

from crawler.store.coalesce import Coalescer
from crawler.store.scripts import Wait, replies_of


class Store:
    """``client``: the redis-py client (one Redis or a cluster); ``coalescer``: None, or the
    ``Coalescer`` its script calls share round trips through."""

    def __init__(self, client: redis.Redis, coalescer: Coalescer | None = None):
        self.client, self.coalescer = client, coalescer

    @classmethod
    def of(cls, client: redis.Redis | Store) -> Store:
        """``client`` if it is a store; else a store of that client, without a coalescer."""
        return client if isinstance(client, Store) else cls(client)

    @classmethod
    def coalesced(cls, client: redis.Redis) -> Store:
        """A worker process's store: every ``run`` shares round trips with other greenlets' calls."""
        return cls(client, Coalescer(client))

    def run(self, calls: list, wait: Wait | None = None, *, own: bool = False, errors: bool = False) -> list:
        """Run ``(script, keys, args)`` calls; their replies in order (``scripts.run_pipelined``).

        Through the coalescer when there is one, unless ``own``: calls their
        caller already gathers from many greenlets (a recording batch's, each
        milliseconds of Redis) take a round trip of their own, so the short
        calls sharing the coalescer's round trips (plans, probes,
        completions, claims) never queue behind them. Raises ``redis.RedisError``: a
        script's error reply (the first of them, after every call ran; with ``errors``, each
        is its call's reply instead) or what failed the round trip.
        """
        co = None if own else self.coalescer
        replies = co.run(calls, wait) if co is not None else replies_of(self.client, calls, wait)
        for reply in replies:
            if isinstance(reply, Exception) and not errors:
                raise reply
        return replies
