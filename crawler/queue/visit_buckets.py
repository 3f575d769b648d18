"""The trim of the queue's per-minute counts: visits, failed visits and the operator rates.

``complete.lua``, ``defer.lua`` and ``claim.lua`` add to these hashes in
every shard and never remove a field, so their housekeeping is the queue's
too. Apart from the transitions because it touches no torrent: it only drops
minutes nobody reads any more, so each hash stays bounded (~2,900 fields).
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.rates import KEPT_SECONDS, field_time

# Per-minute visit counts older than this are dropped (status reads the last hour).
VISIT_BUCKETS_KEPT = 2 * 86400


def trim_visit_buckets(client: redis.Redis, keys: Keys, now: float) -> int:
    """Drop the per-minute visit counts older than ``VISIT_BUCKETS_KEPT`` in every shard of
    ``keys`` (returns how many), and the rates' minutes older than ``rates.KEPT_SECONDS``.

    Two round trips: every hash's fields, then the HDELs. Raises ``StoreError``.
    """
    hashes = [(key, True) for k in keys.all_shards for key in (k.visits, k.failed_visits)]
    hashes += [(k.rates, False) for k in keys.all_shards]
    try:
        p = client.pipeline(transaction=False)
        for key, _ in hashes:
            p.hkeys(key)
        counted = []  # per HDEL sent: whether it drops visit counts
        for (key, visits), names in zip(hashes, p.execute()):
            if visits:
                stale = [m for m in names if int(m) < now - VISIT_BUCKETS_KEPT]
            else:
                stale = [f for f in names if (field_time(f) or 0) < now - KEPT_SECONDS]
            for i in range(0, len(stale), 1000):
                p.hdel(key, *stale[i : i + 1000])
                counted.append(visits)
        return sum(n for n, visits in zip(p.execute(), counted) if visits)
    except redis.RedisError as e:
        raise StoreError(f"trimming visit counts failed: {e}") from e
