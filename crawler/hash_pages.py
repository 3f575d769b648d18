"""Reading whole hashes without holding Redis: HSCAN pages, every hash's pages pipelined.

One HGETALL of a hash of a million fields holds a Redis for ~0.7 s, every
other client waiting; a million HINCRBYs in one script for ~1.3 s
(``bench/bench_stathat_backlog.py``). So
the batches that can grow that large (the StatHat outbox after an outage,
the rollup's outbox) are renamed whole, which is O(1), and then read here a
page at a time: Redis answers each page in a few milliseconds and serves
everyone else between them.

HSCAN returns every field present from the first page to the last at least
once; a field it returns twice (the hash was resized between pages) comes
with the same value, since the callers read batches in flight, whose fields
are only ever deleted, never written, and a dict keeps it once.
"""

from __future__ import annotations

import redis

# Fields asked per page: ~2 ms of Redis for a page of short fields.
PAGE = 2000


def read_hashes(client: redis.Redis, names: dict, count: int = PAGE) -> dict:
    """``{i: {field: value}}`` of every hash ``names[i]`` (absent: empty), read in HSCAN pages
    of about ``count`` fields, one round trip for a page of every hash."""
    fields: dict = {i: {} for i in names}
    cursors = {i: 0 for i in names}
    while cursors:
        pipe = client.pipeline(transaction=False)
        order = list(cursors)
        for i in order:
            pipe.hscan(names[i], cursors[i], count=count)
        for i, (cursor, page) in zip(order, pipe.execute()):
            fields[i].update(page)
            if cursor == 0:
                del cursors[i]
            else:
                cursors[i] = cursor
    return fields
