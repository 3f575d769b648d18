"""A crawl's layout: how many shards its queue and counters have (SPEC §9).

The count is part of the data, not of one process's settings: a torrent's
shard follows from its info-hash modulo the count, so two workers with
different counts would look for the same torrent in different places. The
first process that opens a namespace writes the count (``{ns}:layout``, SET
NX); every later one reads it. ``PEERCRAWL_QUEUE_SHARDS`` unset means "the
crawl's own"; set to another count it is refused at start with the command
that changes it (``peercrawl reshard``).

A namespace written before layouts existed holds its queue under the home
tag: that is the one-shard layout, and it is recorded as such (never as the
configured count, which would hide the torrents already there).
"""

from __future__ import annotations

import json

import redis

from crawler.errors import SettingsError, StoreError
from crawler.keys import Keys


def read(client: redis.Redis, home: Keys) -> int | None:
    """The namespace's recorded shard count, or None if it has none. Raises ``StoreError``."""
    try:
        raw = client.get(home.layout)
    except redis.RedisError as e:
        raise StoreError(f"reading the crawl's layout failed: {e}") from e
    return None if raw is None else parse(raw)


def parse(raw: bytes) -> int:
    """The shard count of a stored layout; ``StoreError`` if it is not one."""
    try:
        n = json.loads(raw)["shards"]
        Keys("x", n)
    except (ValueError, KeyError, TypeError) as e:
        raise StoreError(f"the crawl's layout in Redis is damaged: {raw[:80]!r}") from e
    return n


def _has_unsharded_queue(client: redis.Redis, home: Keys) -> bool:
    return bool(client.exists(home.ready, home.cooling, home.leases, home.evicted, home.quarantined))


def resolve(client: redis.Redis, namespace: str, configured: int | None) -> Keys:
    """The namespace's keys with its shard count, recording it for a new crawl.

    ``configured``: ``PEERCRAWL_QUEUE_SHARDS`` (None: unset). Raises
    ``SettingsError`` when it differs from the crawl's recorded count,
    ``StoreError`` if Redis fails.
    """
    home = Keys(namespace)
    recorded = read(client, home)
    if recorded is None:
        try:
            n = 1 if configured is None or _has_unsharded_queue(client, home) else configured
            client.set(home.layout, json.dumps({"shards": n}), nx=True)
        except redis.RedisError as e:
            raise StoreError(f"recording the crawl's layout failed: {e}") from e
        recorded = read(client, home)
    if configured is not None and configured != recorded:
        raise SettingsError(
            f"PEERCRAWL_QUEUE_SHARDS is {configured} but namespace {namespace!r} has {recorded} "
            f"shard{'s' if recorded != 1 else ''}: unset it, or move the crawl with "
            f"`peercrawl reshard --shards {configured}` (stop its workers first)")
    return Keys(namespace, recorded)
