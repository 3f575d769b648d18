"""Reading whole hashes without holding Redis: HSCAN pages, every hash's pages pipelined.

One HGETALL of a hash of a million fields holds a Redis for ~0.7 s, every
other client waiting; a million HINCRBYs in one script for ~1.3 s
(``bench/bench_stathat_backlog.py``). So the batches that can grow that
large (the StatHat outbox after an outage, the rollup's outbox) are renamed
whole, which is O(1), and then read here a page at a time: Redis answers
each page in a few milliseconds and serves everyone else between them.

HSCAN returns every field present from the first page to the last at least
once, and may return one twice when the hash was resized between pages. The
callers read batches in flight, whose fields are never written, only
deleted once handled: read whole, a dict keeps a repeated field once (same
value); read page by page (``pages``), a field handled and deleted before the
next page is asked for never comes again, and one still held may, so the
caller skips what it holds.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis

# Fields asked per page: ~2 ms of Redis for a page of short fields.
PAGE = 2000


def pages(client: redis.Redis, names: dict, count: int = PAGE) -> Iterator[dict]:
    """``{i: {field: value}}`` per round trip: the next HSCAN page of about ``count`` fields of
    each hash ``names[i]`` not yet read through (an absent hash: one empty page)."""
    cursors = {i: 0 for i in names}
    while cursors:
        pipe = client.pipeline(transaction=False)
        order = list(cursors)
        for i in order:
            pipe.hscan(names[i], cursors[i], count=count)
        got = {}
        for i, (cursor, page) in zip(order, pipe.execute()):
            got[i] = page
            if cursor == 0:
                del cursors[i]
            else:
                cursors[i] = cursor
        yield got


def read_hashes(client: redis.Redis, names: dict, count: int = PAGE) -> dict:
    """``{i: {field: value}}`` of every hash ``names[i]`` (absent: empty), read whole in
    ``pages``."""
    fields: dict = {i: {} for i in names}
    for got in pages(client, names, count):
        for i, page in got.items():
            fields[i].update(page)
    return fields
