"""Moving a crawl to another number of shards (``peercrawl reshard``, contract §9).

A torrent's shard is its info-hash modulo the shard count, so a new count
moves most torrents to another hash tag, and on a cluster to another slot:
no single script can move one. The move is therefore made of steps that
are each safe to repeat, in an order where a crash anywhere leaves every
torrent whole in at least one place:

1. the layout says ``{"shards": old, "moving_to": new}`` (every process
   refuses to start while it does, ``crawler.store.layout``);
2. per batch of torrents of an old shard: read everything the queue keeps
   of them there (state set and score, ``since``, held score, claim count,
   expiry streak, tombstone, quarantine record, and the torrent's own keys
   as ``DUMP``s with their TTLs); write it into each torrent's new shard
   (one MULTI per new shard: ZADD, HSET, RESTORE REPLACE, which give the
   same result however often they run); then remove it from the old shard
   (one MULTI). A crash before the removal leaves the torrent in both
   places, and the next run copies it again, identically, then removes it;
3. when no old shard holds a torrent any more, the layout says
   ``{"shards": new}``.

Nothing else writes the queue meanwhile: ``reshard`` refuses to run while
a worker is registered live, and workers refuse to start during a move. A
running crawl cannot be resharded in place because each process knows the
shard count from its start: a worker of the old count would claim from
and complete into shards the move is emptying.

The per-minute visit counts (``status``'s visits in the last hour), the
operator rates and the lanes' credits are not moved: a move starts them
afresh. The counters' shards stay as they are
(``docs/redis.md``: a dedupe mark holds only keyed fingerprints of (metric,
IP) pairs, from which no new shard of an IP can be computed).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import redis

from crawler.errors import SettingsError, StoreError
from crawler.keys import Keys
from crawler.queue.lanes import MARKED
from crawler.registry.worker_registry import WorkerRegistry
from crawler.store import layout

# Torrents read, copied and removed per step: one step's commands stay small.
BATCH = 500
def _states(k: Keys) -> tuple[str, ...]:
    """The state sets of shard ``k``, one of which holds each torrent (every lane's ready set)."""
    return (k.ready, k.cooling, k.leases, k.evicted, k.quarantined, *(k.ready_in(lane) for lane in MARKED))


def _sets(k: Keys) -> tuple[str, ...]:
    """Every sorted set of shard ``k`` keyed by info-hash, copied member by member: the states,
    ``since`` (a ready torrent's time), ``atrisk`` (staged eviction) and the lanes' members."""
    return (*_states(k), k.since, k.atrisk, *(k.lane_members(lane) for lane in MARKED))


# how many there are in every shard
N_SETS = len(_sets(Keys("x")))
# Hashes of the shard keyed by info-hash, copied field by field.
FIELDS = ("held", "claims", "expiries", "tombstones", "quarantine")


def _own_keys(k: Keys, h: str) -> tuple[str, ...]:
    return (k.torrent(h), k.trackers(h), k.history(h), k.tracker_min_interval(h))


class Reshard:
    """Moves namespace ``namespace``'s queue to ``shards`` shards. ``progress(moved)`` is told each batch."""

    def __init__(self, client: redis.Redis, namespace: str, shards: int,
                 progress: Callable[[int], None] | None = None):
        self.client = client
        self.namespace = namespace
        self.target = Keys(namespace, shards)
        self.progress = progress or (lambda moved: None)

    def run(self, now: float) -> dict:
        """Move every torrent; returns ``{"from", "to", "moved"}``. Raises ``SettingsError``, ``StoreError``."""
        old = self._begin(now)
        moved = 0
        try:
            for k in old.all_shards:
                moved += self._empty(k)
            left = self._left(old)
            if left:
                raise StoreError(f"{left} torrents are still in the old shards after the move; run it again")
            done = {k: v for k, v in self.record.items() if k != "moving_to"}
            self.client.set(old.home.layout, json.dumps(dict(done, shards=self.target.shards)))
        except redis.RedisError as e:
            raise StoreError(f"moving the crawl failed (run the same command again): {e}") from e
        return {"from": old.shards, "to": self.target.shards, "moved": moved}

    def _begin(self, now: float) -> Keys:
        """Check nobody works and record the move; returns the old layout."""
        home = Keys(self.namespace)
        try:
            live = WorkerRegistry(self.client, home).live(now)
            raw = self.client.get(home.layout)
        except redis.RedisError as e:
            raise StoreError(f"reading the crawl's layout failed: {e}") from e
        if live:
            raise SettingsError(f"{len(live)} worker(s) of namespace {self.namespace!r} are running "
                                f"({', '.join(w['id'] for w in live[:3])}): stop them before moving the crawl")
        record = layout.parse(raw) if raw else {"shards": 1, "counters": 1}
        current, moving = record["shards"], record.get("moving_to")
        if moving not in (None, self.target.shards):
            raise SettingsError(f"a move of namespace {self.namespace!r} to {moving} shards is unfinished: "
                                f"run `peercrawl reshard --shards {moving}` to finish it first")
        self.record = record  # its counters and mark buckets stay as they are
        self.target = layout.keys_of(self.namespace, dict(record, shards=self.target.shards))
        if current == self.target.shards and moving is None and raw:
            return layout.keys_of(self.namespace, record)
        try:
            self.client.set(home.layout, json.dumps(dict(record, moving_to=self.target.shards)))
        except redis.RedisError as e:
            raise StoreError(f"recording the move failed: {e}") from e
        return layout.keys_of(self.namespace, record)

    def _empty(self, k: Keys) -> int:
        """Move every torrent of old shard ``k`` that belongs elsewhere; returns how many."""
        moved = 0
        for state in _states(k):
            while True:
                batch = self._members(k, state)
                if not batch:
                    break
                self._move(k, batch)
                moved += len(batch)
                self.progress(moved)
        return moved

    def _members(self, k: Keys, state: str) -> list[str]:
        """Up to ``BATCH`` members of state set ``state`` (a key of ``k``) that must leave (those that
        stay are skipped by scanning)."""
        out: list[str] = []
        for m in self.client.zscan_iter(state, count=BATCH):
            h = m[0].decode()
            if self.target.for_torrent(h).prefix != k.prefix:
                out.append(h)
                if len(out) == BATCH:
                    break
        return out

    def _read(self, k: Keys, batch: list[str]) -> list[dict]:
        p = self.client.pipeline(transaction=False)
        for h in batch:
            for key in _sets(k):
                p.zscore(key, h)
            for name in FIELDS:
                p.hget(getattr(k, name), h)
            for key in _own_keys(k, h):
                p.dump(key)
                p.pttl(key)
        got = p.execute()
        width = N_SETS + len(FIELDS) + 2 * 4
        rows = []
        for i, h in enumerate(batch):
            r = got[i * width:(i + 1) * width]
            rows.append({"h": h, "sets": r[:N_SETS], "fields": r[N_SETS:N_SETS + len(FIELDS)],
                         "dumps": list(zip(r[-8::2], r[-7::2]))})
        return rows

    def _write(self, rows: list[dict]) -> None:
        by_shard: dict[Keys, list[dict]] = {}
        for row in rows:
            by_shard.setdefault(self.target.for_torrent(row["h"]), []).append(row)
        for k, part in by_shard.items():
            p = self.client.pipeline(transaction=True)
            for row in part:
                h = row["h"]
                for key, score in zip(_sets(k), row["sets"]):
                    if score is not None:
                        p.zadd(key, {h: score})
                for name, value in zip(FIELDS, row["fields"]):
                    if value is not None:
                        p.hset(getattr(k, name), h, value)
                for key, (dump, ttl) in zip(_own_keys(k, h), row["dumps"]):
                    if dump is not None:
                        p.restore(key, max(0, ttl), dump, replace=True)
            p.execute()

    def _drop(self, k: Keys, batch: list[str]) -> None:
        p = self.client.pipeline(transaction=True)
        for h in batch:
            p.delete(*_own_keys(k, h))
            for name in FIELDS:
                p.hdel(getattr(k, name), h)
            for key in _sets(k):
                p.zrem(key, h)
        p.execute()

    def _move(self, k: Keys, batch: list[str]) -> None:
        """Copy ``batch`` into its new shards, then remove it from ``k``."""
        self._write(self._read(k, batch))
        self._drop(k, batch)

    def _left(self, old: Keys) -> int:
        """Torrents of the old shards that belong elsewhere (0 after a finished move)."""
        return sum(len(self._members(k, state)) for k in old.all_shards for state in _states(k))
