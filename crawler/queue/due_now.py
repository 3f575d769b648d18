"""Due now: a cooling torrent visited at the next claim rather than at its due time (``due_now.lua``).

For whoever fixed what made its visits fail (a setting, a tracker, the
network) and does not want to wait out the retry delay or the revisit
interval. The torrent keeps its score and lane; trackers inside the min
interval they gave are still left alone (contract §5).
"""

from __future__ import annotations

import time

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.lanes import MARKED
from crawler.store import scripts


class DueNow:
    """Makes cooling torrents of one namespace due at once."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client, self.keys = client, keys
        self._script = scripts.register(client, "due_now", __package__)

    def make_due(self, info_hash: str, now: float | None = None) -> str:
        """Make ``info_hash`` due at ``now``: "due", or where it stands when nothing changed ("ready",
        "in_flight", "quarantined", "evicted", "untracked"). Raises ``StoreError``."""
        k = self.keys.for_torrent(info_hash)
        now = time.time() if now is None else now
        try:
            reply = self._script(keys=[k.cooling, k.ready, k.leases, k.quarantined, k.evicted,
                                       *(k.lane_members(lane) for lane in MARKED)], args=[info_hash, repr(now)])
        except redis.RedisError as e:
            raise StoreError(f"making {info_hash} due failed: {e}") from e
        return reply.decode() if isinstance(reply, bytes) else reply
