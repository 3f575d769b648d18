"""Removing expired dedupe marks from their buckets, in bounded steps, to give the memory back.

A mark counts while its time is inside the window whether or not it is
removed (``marks``), so the sweep only returns memory: ``sweep.lua`` drops a
bucket's expired records, ``SWEEP_CALL_BUCKETS`` buckets a call.
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.store.scripts import register

# Buckets one sweep call examines (~100 fields each): ~1-2 ms of Redis.
SWEEP_CALL_BUCKETS = 64


class MarkSweep:
    """Sweeps the mark buckets of a crawl's counter shards. ``client``: a redis-py client; ``keys``: the
    namespace's home ``Keys``; ``shards``: each shard's ``shard_keys.ShardKeys``; ``buckets``: mark
    buckets a shard; ``window``: the dedupe window in seconds; ``rollup``: the crawl's ``Rollup``
    (several shards), or None."""

    def __init__(self, client: redis.Redis, keys, shards: list, buckets: int, window: int, rollup=None):
        self.client, self.keys, self.shards, self.buckets, self.window, self.rollup = (
            client, keys, shards, buckets, window, rollup)
        self._sweep = register(client, "sweep", package=__package__)

    def sweep(self, budget: int = 1024, now: float | None = None) -> int:
        """Remove expired marks from the next ``budget`` buckets; returns fields removed.

        Workers share one cursor (INCRBY on the home's ``mk:sweep``) over the
        buckets of every shard, shard by shard, so concurrent sweepers take
        different buckets and each sweep.lua call reads one shard's; a full
        pass over 2**18 buckets at 1,024 per flush cycle of 10 s takes ~45
        minutes, well inside the 30-day window. With several shards it then
        adds the shards' rollup outboxes to the totals (``rollup.Rollup``), so
        they stay short between reads. ``now`` defaults to the Redis server's
        clock.
        """
        per = self.buckets
        n = per * len(self.shards)
        budget = max(1, min(budget, n))
        try:
            if now is None:
                now = self.client.time()[0]
            start = self.client.incrby(self.keys.sweep_cursor, budget) - budget
            cutoff = int(now) - self.window
            removed = 0
            chunk: list[bytes] = []
            at = None
            for i in range(budget):
                g = (start + i) % n
                s, b = divmod(g, per)
                if chunk and (s != at or len(chunk) == SWEEP_CALL_BUCKETS):
                    removed += self._sweep(keys=chunk, args=[cutoff])
                    chunk = []
                at = s
                chunk.append(self.shards[s].bucket(b))
            removed += self._sweep(keys=chunk, args=[cutoff])
        except redis.RedisError as e:
            raise StoreError(f"sweeping dedupe marks failed: {e}") from e
        if self.rollup is not None:
            self.rollup.settle(everything=False)
        return removed
