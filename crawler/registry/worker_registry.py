"""The worker registry that ``peercrawl status`` lists (contract §7): its one writer and reader.

Each worker process writes its figures to ``keys.worker(id)`` (a HASH whose
values are JSON) and its heartbeat expiry to the ``keys.workers`` ZSET; the
hash expires with the heartbeat. ``live`` lists the entries whose expiry is in
the future and drops the others, so a process killed with SIGKILL drops out
once its expiry passes, with nobody cleaning up after it. The worker side
(identity, how often to beat) is ``workers.heartbeat.Heartbeat``.
"""

from __future__ import annotations

import json
from typing import cast

import redis

from crawler.errors import StoreError
from crawler.keys import Keys


class WorkerRegistry:
    """The live workers of one namespace. ``client``: a redis-py client (bytes responses)."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client, self.keys = client, keys

    def write(self, worker_id: str, row: dict, ttl: float, now: float) -> None:
        """Register ``worker_id`` with ``row`` (JSON-able values) until ``now + ttl``; raises ``StoreError``."""
        key = self.keys.worker(worker_id)
        p = self.client.pipeline(transaction=True)
        p.hset(key, mapping={k: json.dumps(v) for k, v in row.items()})
        p.expire(key, int(ttl) + 1)
        p.zadd(self.keys.workers, {worker_id: now + ttl})
        try:
            p.execute()
        except redis.RedisError as e:
            raise StoreError(f"worker heartbeat failed: {e}") from e

    def leave(self, worker_id: str) -> None:
        """Remove ``worker_id`` at once (a clean shutdown); raises ``StoreError``."""
        p = self.client.pipeline(transaction=True)
        p.zrem(self.keys.workers, worker_id)
        p.delete(self.keys.worker(worker_id))
        try:
            p.execute()
        except redis.RedisError as e:
            raise StoreError(f"leaving the worker registry failed: {e}") from e

    def live(self, now: float) -> list[dict]:
        """Live worker processes and their figures (``id`` and each field of the row); expired entries are dropped."""
        c, k = self.client, self.keys
        try:
            c.zremrangebyscore(k.workers, "-inf", now)
            # bytes: the client decodes no responses (redis-py's types cannot tell)
            ids = cast(list[bytes], c.zrangebyscore(k.workers, now, "+inf"))
            p = c.pipeline(transaction=False)
            for wid in ids:
                p.hgetall(k.worker(wid.decode()))
            rows = p.execute() if ids else []
        except redis.RedisError as e:
            raise StoreError(f"reading the worker registry failed: {e}") from e
        return [_row(wid.decode(), h) for wid, h in zip(ids, rows) if h]


def _row(worker_id: str, h: dict) -> dict:
    """A registry entry as ``status`` shows it: each value JSON-decoded where it is JSON."""
    row: dict = {"id": worker_id}
    for name, value in ((a.decode(), b.decode()) for a, b in h.items()):
        try:
            row[name] = json.loads(value)
        except ValueError:
            row[name] = value
    return row
