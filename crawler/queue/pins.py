"""Pins: torrents exempt from eviction (contract §1 staged eviction, §7 ``torrent --pin``).

A pin is the torrent's ``pinned`` field ("forever" or the unix time until
which it holds), set and removed by ``pin.lua`` only for a tracked torrent,
and read by ``complete.lua``: a pinned torrent's score is held at the
eviction threshold instead of evicting it, whatever its stage, and it is
never listed at risk. A pin whose time has passed is no pin.
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.store import scripts


class Pins:
    """Pins and unpins torrents of one namespace."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client, self.keys = client, keys
        self._script = scripts.register(client, "pin", __package__)

    def pin(self, info_hash: str, until: float | None = None) -> str:
        """Pin ``info_hash`` (until the unix time ``until``; None: for ever).

        Returns "pinned", or "evicted" / "untracked" when there is nothing to
        pin. Raises ``StoreError``.
        """
        return self._call(info_hash, "pin", "forever" if until is None else repr(float(until)))

    def unpin(self, info_hash: str) -> str:
        """End ``info_hash``'s pin: "unpinned", or "evicted" / "untracked". Raises ``StoreError``."""
        return self._call(info_hash, "unpin", "")

    def _call(self, h: str, op: str, until: str) -> str:
        k = self.keys.for_torrent(h)
        try:
            reply = self._script(keys=[k.ready, k.cooling, k.leases, k.quarantined, k.evicted, k.torrent(h),
                                       k.atrisk], args=[h, op, until])
        except redis.RedisError as e:
            raise StoreError(f"{op}ning {h} failed: {e}") from e
        return reply.decode() if isinstance(reply, bytes) else reply
