"""A crawl's layout: how many shards its queue and counters have (contract §9).

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

The layout also records the counters' shard count (``counters``): equal to
the queue's for a new crawl, kept as it was by ``peercrawl reshard``. While
a move runs (``moving_to``), no process starts. And the dedupe marks' bucket
count (``marks``, ``PEERCRAWL_MARK_BUCKETS``), which no command changes: a
mark's bucket follows from it. A crawl that records none has the count every
crawl had before it was a setting (``shard_layout.DEFAULT_MARK_BUCKETS``).
``rosters``: a crawl made since torrents' marks are kept in their rosters
(``crawler.counters.marks``); one that does not say so may hold marks of the
window by (IP, torrent), which the recorder then looks at too.
"""

from __future__ import annotations

import json

import redis

from crawler.errors import SettingsError, StoreError
from crawler.keys import Keys


def read(client: redis.Redis, home: Keys) -> dict | None:
    """The namespace's recorded layout (``shards``, ``counters``, maybe ``marks`` and ``moving_to``), or None.

    Raises ``StoreError``.
    """
    try:
        raw = client.get(home.layout)
    except redis.RedisError as e:
        raise StoreError(f"reading the crawl's layout failed: {e}") from e
    return None if raw is None else parse(raw)


def parse(raw: bytes | str) -> dict:
    """A stored layout, checked; ``StoreError`` if it is not one."""
    try:
        record = json.loads(raw)
        record.setdefault("counters", record["shards"])
        if record.get("rosters", False) not in (True, False):
            raise ValueError("rosters")
        Keys("x", record["shards"], counters=record["counters"], marks=record.get("marks", 0))
        if record.get("moving_to") is not None:
            Keys("x", record["moving_to"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise StoreError(f"the crawl's layout in Redis is damaged: {raw[:80]!r}") from e
    return record


def keys_of(namespace: str, record: dict) -> Keys:
    """The keys of a namespace laid out as ``record`` says."""
    n, c = record["shards"], record["counters"]
    return Keys(namespace, n, counters=0 if c == n else c, marks=record.get("marks", 0),
                rosters=record.get("rosters", False))


def _has_unsharded_queue(client: redis.Redis, home: Keys) -> bool:
    return bool(client.exists(home.ready, home.cooling, home.leases, home.evicted, home.quarantined))


def resolve(client: redis.Redis, namespace: str, configured: int | None, marks: int | None = None) -> Keys:
    """The namespace's keys with its shard and mark bucket counts, recording them for a new crawl.

    ``configured``: ``PEERCRAWL_QUEUE_SHARDS``, ``marks``: ``PEERCRAWL_MARK_BUCKETS`` (None:
    unset). Raises ``SettingsError`` when either differs from the crawl's recorded count,
    ``StoreError`` if Redis fails.
    """
    home = Keys(namespace)
    recorded = read(client, home)
    if recorded is None:
        try:
            unsharded = _has_unsharded_queue(client, home)
            n = 1 if configured is None or unsharded else configured
            record: dict = {"shards": n, "counters": n}
            if not unsharded:  # a crawl from before layouts has the old count, and marks by (IP, torrent)
                record["rosters"] = True
                if marks is not None:
                    record["marks"] = marks
            client.set(home.layout, json.dumps(record), nx=True)
        except redis.RedisError as e:
            raise StoreError(f"recording the crawl's layout failed: {e}") from e
        recorded = read(client, home)
        assert recorded is not None  # set just above, by this call or whoever set it first
    if recorded.get("moving_to") is not None:
        raise SettingsError(
            f"namespace {namespace!r} is being moved to {recorded['moving_to']} shards: wait for "
            f"`peercrawl reshard --shards {recorded['moving_to']}` to finish (or run it again if it stopped)")
    n = recorded["shards"]
    if configured is not None and configured != n:
        raise SettingsError(
            f"PEERCRAWL_QUEUE_SHARDS is {configured} but namespace {namespace!r} has {n} "
            f"shard{'s' if n != 1 else ''}: unset it, or move the crawl with "
            f"`peercrawl reshard --shards {configured}` (stop its workers first)")
    keys = keys_of(namespace, recorded)
    if marks is not None and marks != keys.mark_buckets:
        raise SettingsError(
            f"PEERCRAWL_MARK_BUCKETS is {marks} but namespace {namespace!r} has {keys.mark_buckets} mark buckets: "
            f"unset it (a crawl keeps its count: another would count every IP of the dedupe window again)")
    return keys
