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
shard, which answers only the candidates it found. The candidates go as
digests (``digest``: 16 hex characters whatever the URL's length), so what
crosses the network is the torrents' hashes and 16 bytes per candidate per
page: not the sets, nor every candidate's URL with every page.

Cost: one walk reads every tracked torrent's set inside Redis (about 2 µs a
set of a few trackers), so ~2 s of Redis time for a million torrents, in
calls of ``PAGE`` sets (~1 ms each). Each distinct URL of a call is hashed
once (~1 µs): a catalogue whose torrents share their trackers costs that,
one where few URLs repeat up to twice that. ``TrackerHealth.prune`` walks
only when some tracker went unused for ``PEERCRAWL_TRACKER_PRUNE_SECONDS``, at most
once per ``PRUNE_EVERY`` for the whole namespace (``tracker_walk.lua``),
and a candidate found named is not one again for a whole period.
"""

from __future__ import annotations

import hashlib

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.lanes import LANES
from crawler.store import scripts

# Torrents per tracker_named.lua call: a few hundred sets keep a call near a millisecond.
PAGE = 500


def digest(url: str) -> str:
    """What ``tracker_named.lua`` matches a candidate by: the first 8 bytes of the SHA-1 of its UTF-8
    bytes (as Redis stores it), in hex."""
    return hashlib.sha1(url.encode("utf-8")).hexdigest()[:16]


def named(client: redis.Redis, keys: Keys, candidates: list[str], page: int = PAGE) -> set[str]:
    """The ``candidates`` some torrent not evicted names in its own tracker set. Raises ``StoreError``.

    Stops as soon as every candidate was found. A candidate sharing its digest with a named one
    counts as named (kept: the safe side).
    """
    by_digest: dict[str, list[str]] = {}
    for url in dict.fromkeys(candidates):
        by_digest.setdefault(digest(url), []).append(url)
    left = set(by_digest)
    if not left:
        return set()
    script = scripts.register(client, "tracker_named", package=__package__)
    found: set[str] = set()
    try:
        _walk(client, keys, script, left, found, page)
    except redis.RedisError as e:
        raise StoreError(f"reading which trackers torrents name: {e}") from e
    return {url for d in found for url in by_digest[d]}


def _walk(client: redis.Redis, keys: Keys, script, left: set[str], found: set[str], page: int) -> None:
    """Ask every torrent's set, a page at a time, for the digests of ``left`` until none is left."""
    for shard in keys.all_shards:
        for zset in (shard.cooling, *(shard.ready_in(lane) for lane in LANES), shard.leases, shard.quarantined):
            batch: list[str] = []
            for member, _ in client.zscan_iter(zset, count=page):
                batch.append(shard.trackers(member.decode() if isinstance(member, bytes) else member))
                if len(batch) >= page:
                    left -= _ask(script, batch, left, found)
                    batch = []
                    if not left:
                        return
            if batch:
                left -= _ask(script, batch, left, found)
                if not left:
                    return


def _ask(script, sets: list[str], left: set[str], found: set[str]) -> set[str]:
    """The digests of ``left`` one of ``sets`` holds, added to ``found`` too."""
    got = {d.decode() if isinstance(d, bytes) else d for d in script(keys=sets, args=["".join(sorted(left))])}
    got &= left
    found |= got
    return got
