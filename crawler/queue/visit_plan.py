"""The trackers a visit may ask: the torrent's own set, bounded, and when each may be asked again.

``plan.lua`` hands a visit at most ``PEERCRAWL_MAX_TRACKERS_PER_TORRENT`` of
the torrent's trackers (a random draw of a larger set, so a set stored before
the bound is never announced whole) with each tracker's not-before time, in
one round trip. The visit writes those times back (``hold_trackers``) when a
tracker asks for a minimum interval. Apart from the transitions because a
plan changes no torrent's state: it is the one read a visit needs, and its
one write is a per-torrent hash that expires on its own.
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.store import scripts
from crawler.store.handle import Store


class VisitPlan:
    """The trackers of one namespace's torrents a visit may ask. Raises ``StoreError``."""

    def __init__(self, client: redis.Redis | Store, keys: Keys, settings: Settings):
        self.store = Store.of(client)  # a worker's: its script calls share round trips
        client = self.client = self.store.client
        self.keys = keys
        self.settings = settings
        self.script = scripts.register(client, "plan", __package__)

    def plan(self, info_hash: str) -> tuple[list[str], dict[str, float]]:
        """The torrent's own trackers (at most the per-torrent bound, a random draw of a larger
        set) and tracker -> not-before time, in one round trip."""
        k = self.keys.for_torrent(info_hash)
        cap = self.settings.max_trackers_per_torrent
        try:
            [(own, flat, _)] = self.store.run([(self.script, [k.trackers(info_hash), k.tracker_min_interval(info_hash)], [cap])])
        except redis.RedisError as e:
            raise StoreError(f"reading the torrent's trackers failed: {e}") from e
        return ([u.decode() for u in own[:cap]],
                {flat[i].decode(): float(flat[i + 1]) for i in range(0, len(flat), 2)})

    def hold_trackers(self, info_hash: str, not_before: dict[str, float], ttl: float) -> None:
        """Ask no tracker of ``not_before`` for ``info_hash`` before its time (what ``plan`` reads back).

        One MULTI; the hash expires ``ttl`` seconds after its last write.
        """
        if not not_before:
            return
        key = self.keys.for_torrent(info_hash).tracker_min_interval(info_hash)
        p = self.client.pipeline(transaction=True)
        p.hset(key, mapping={u: repr(t) for u, t in not_before.items()})
        p.expire(key, int(ttl))
        try:
            p.execute()
        except redis.RedisError as e:
            raise StoreError(f"writing the trackers' min interval failed: {e}") from e
