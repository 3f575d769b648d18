"""``torrents.processed``: a torrent counted once per UTC clock hour (contract §6).

One ``visited.lua`` call a visit, in the counter shard of the torrent's
info-hash (``keys.shard_of``): the hour's set of torrents seen and the StatHat
outbox in one step, so a retried visit counts nothing twice. Only when
StatHat posts the family (``PEERCRAWL_STATHAT_FAMILIES``).
"""

from __future__ import annotations

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
        h = info_hash_hex(info_hash)
        shard = self.keys.counter_shard(shard_of(h, self.keys.counter_shards))
        try:
            keys, args = [shard.processed(int(now) // 3600), shard.outbox], [h, 2 * 3600]
            return bool(self.store.run([(self.script, keys, args)], wait=self.wait)[0])
        except redis.RedisError as e:
            raise StoreError(f"recording a visit failed: {e}") from e
