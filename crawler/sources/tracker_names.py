"""Which trackers the crawl's torrents still name: the check before tracker health is pruned.

A torrent names its own trackers in its tracker set (``Keys.trackers``,
written by ``add``; an evicted torrent's set outlives it with its
tombstone, so a set alone does not mean a tracked torrent). No index maps a
tracker back to the torrents naming it, so ``named`` walks every torrent
that is not evicted, shard by shard, in the order torrents move
(cooling, then each lane's ready torrents, then those in flight, then the
quarantined): a torrent moving on during the walk is met again further on,
except one going from in flight to cooling, whose visit just announced to
its trackers (``tracker_prune.lua`` keeps a candidate used since the walk
began). Each page of torrents is one ``tracker_named.lua`` call in their
shard, which answers only the candidates it found: what crosses the network
is the torrents' hashes and the candidates, not the sets.

Cost: one walk reads every tracked torrent's set inside Redis (about 2 µs a
set of a few trackers), so ~2 s of Redis time for a million torrents, in
calls of ``PAGE`` sets (~1 ms each). ``TrackerHealth.prune`` walks only when
some tracker went unused for ``PEERCRAWL_TRACKER_PRUNE_SECONDS``, at most
once per ``PRUNE_EVERY`` for the whole namespace (``tracker_walk.lua``),
and a candidate found named is not one again for a whole period.
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.lanes import LANES
from crawler.store import scripts

# Torrents per tracker_named.lua call: a few hundred sets keep a call near a millisecond.
PAGE = 500


def named(client: redis.Redis, keys: Keys, candidates: list[str], page: int = PAGE) -> set[str]:
    """The ``candidates`` some torrent not evicted names in its own tracker set. Raises ``StoreError``.

    Stops as soon as every candidate was found.
    """
    left = set(candidates)
    if not left:
        return set()
    script = scripts.register(client, "tracker_named", package="crawler.sources")
    found: set[str] = set()
    try:
        for shard in keys.all_shards:
            sets = (shard.cooling, *(shard.ready_in(lane) for lane in LANES), shard.leases, shard.quarantined)
            for zset in sets:
                batch: list[str] = []
                for member, _ in client.zscan_iter(zset, count=page):
                    batch.append(shard.trackers(member.decode() if isinstance(member, bytes) else member))
                    if len(batch) >= page:
                        left -= _ask(script, batch, left, found)
                        batch = []
                        if not left:
                            return found
                if batch:
                    left -= _ask(script, batch, left, found)
                    if not left:
                        return found
    except redis.RedisError as e:
        raise StoreError(f"reading which trackers torrents name: {e}") from e
    return found


def _ask(script, sets: list[str], left: set[str], found: set[str]) -> set[str]:
    """The candidates of ``left`` one of ``sets`` holds, added to ``found`` too."""
    got = {u.decode() if isinstance(u, bytes) else u for u in script(keys=sets, args=sorted(left))}
    found |= got
    return got
