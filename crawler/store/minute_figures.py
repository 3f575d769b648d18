"""Figures kept per UTC minute in expiring hashes (the announce cap's, discovery's, the requests'), read back.

Writers HINCRBY the hash of the current minute (``unix time // 60``) and let
it expire after a few minutes; ``status`` reads the last minute and this one
with ``recent``: every field summed, over the seconds they cover (60 plus
this minute's part), so a figure per second or minute is never based on a
few seconds only. ``each_minute`` reads a longer run of minutes (the last
hour of the requests sent to the sources), one hash per minute.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from crawler.errors import StoreError


def recent(client: redis.Redis, key_of: Callable[[int], str], now: float, what: str) -> tuple[dict[str, int], float]:
    """(field -> total over the last minute and this one, the seconds they cover); ``key_of(minute)``
    names a minute's hash. Raises ``StoreError`` naming ``what``."""
    minute = int(now) // 60
    totals: dict[str, int] = {}
    for h in each_minute(client, key_of, range(minute - 1, minute + 1), what):
        for name, v in h.items():
            totals[name] = totals.get(name, 0) + v
    return totals, 60 + now - minute * 60


def each_minute(client: redis.Redis, key_of: Callable[[int], str], minutes: range, what: str) -> list[dict[str, int]]:
    """Every field of each minute's hash (``key_of(minute)``), in the order of ``minutes``: one round
    trip. Raises ``StoreError`` naming ``what``."""
    try:
        with client.pipeline(transaction=False) as p:
            for m in minutes:
                p.hgetall(key_of(m))
            got = p.execute()
    except redis.RedisError as e:
        raise StoreError(f"reading {what}: {e}") from e
    return [{f.decode(): int(v) for f, v in h.items()} for h in got]
