"""``torrents.processed``: a torrent counted once per UTC clock hour (contract §6).

One ``visited.lua`` call for the visits of a batch in one counter shard (the
shard of each torrent's info-hash: ``keys.shard_of``) and hour: the hour's set
of torrents seen and the StatHat outbox in one step, so a retried visit counts
nothing twice. A worker notes its visits with their recording batch
(``crawler.counters.batcher``): a call each cost Redis more than its work, and
the visit a round trip. Only when StatHat posts the family
(``PEERCRAWL_STATHAT_FAMILIES``).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from crawler.counters.names import info_hash_hex
from crawler.errors import StoreError
from crawler.keys import Keys, shard_of
from crawler.store.replica_wait import Wait
from crawler.store.scripts import register
from crawler.store.store import Store


class Processed:
    """``store``: the recorder's ``Store``; ``keys``: the namespace's home ``Keys``; ``wait``: the
    replicas each call waits for (``Wait``, or None)."""

    def __init__(self, store: Store, keys: Keys, wait: Wait | None):
        self.store, self.keys, self.wait = store, keys, wait
        self.script = register(store.client, "visited", package=__package__)

    def visited(self, info_hash: str, now: float) -> bool:
        """Note one visit of ``info_hash`` at ``now``; True when it added 1 to its shard's outbox
        (the torrent's first visit of the hour). Raises ``StoreError``."""
        return self.visited_many([(info_hash, now)]) == [True]

    def visited_many(self, visits: Sequence[tuple[str, float]]) -> list[bool]:
        """``visited`` of each ``(info-hash, now)`` of ``visits``, in one round trip: one call a counter
        shard and hour. Raises ``ValueError`` for a bad info-hash before anything is sent, ``StoreError``."""
        n = self.keys.counter_shards
        groups: dict[tuple[int, int], list[int]] = {}
        hashes = [info_hash_hex(h) for h, _ in visits]
        for i, (h, (_, now)) in enumerate(zip(hashes, visits)):
            groups.setdefault((shard_of(h, n), int(now) // 3600), []).append(i)
        calls = []
        for (j, hour), at in groups.items():
            shard = self.keys.counter_shard(j)
            calls.append((self.script, [shard.processed(hour), shard.outbox], [2 * 3600, *(hashes[i] for i in at)]))
        try:
            replies = self.store.run(calls, wait=self.wait) if calls else []
        except redis.RedisError as e:
            raise StoreError(f"recording a visit failed: {e}") from e
        out = [False] * len(visits)
        for at, flags in zip(groups.values(), replies, strict=True):
            for i, flag in zip(at, flags, strict=True):
                out[i] = flag == ord("1")
        return out
