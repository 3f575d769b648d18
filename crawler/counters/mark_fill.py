"""How full the mark buckets are, for ``status``.

A script copies each bucket it changes whole (``marks.lua``), so a visit's
Redis time grows with the records a bucket holds: a first visit's scripts
took 4 times as long at ~2,000 records a bucket as at ~100, 9 times at
~9,000 (bench/results/2026-11-30-bench_visit_cost-mark-strings.md). The
count is fixed at a crawl's creation (``PEERCRAWL_MARK_BUCKETS``), so a crawl
that outgrew it can only be told: ``mark_fill_report`` reads the length of
``SAMPLES`` buckets picked at random over the counter shards (one round
trip; records expired but not swept yet count too, as the scripts copy
them) and says, past ``CROWDED`` records a bucket, what count a new crawl of
this size would want.
"""

from __future__ import annotations

import math
import random

import redis

from crawler.counters.marks import RECORD
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.shard_layout import MAX_MARK_BUCKETS

# Buckets whose length status reads, over all counter shards.
SAMPLES = 64
# Records a bucket past which status warns: ten times the ~100 a bucket is sized for.
CROWDED = 1000
# Records a bucket a crawl is sized for (docs/operations.md).
SIZED = 100


def mark_fill_report(client: redis.Redis, keys: Keys, rng: random.Random | None = None) -> dict:
    """``{"buckets", "sampled", "records_per_bucket", "warning"}`` (``warning``: a line, or None).

    ``keys``: the crawl's home keys (their ``mark_buckets``); raises ``StoreError``."""
    rng = rng or random.Random()
    shards = keys.all_counter_shards
    per = keys.shard_mark_buckets
    picks = [(shards[i % len(shards)], rng.randrange(per)) for i in range(SAMPLES)]
    try:
        pipe = client.pipeline(transaction=False)
        for shard, n in picks:
            pipe.strlen(shard.mark_bucket(n))
        lengths = pipe.execute()
    except redis.RedisError as e:
        raise StoreError(f"reading the mark buckets' lengths failed: {e}") from e
    records = sum(int(x) for x in lengths) / RECORD / len(picks)
    warning = None
    if records > CROWDED:
        want = 1 << max(0, math.ceil(math.log2(records * keys.mark_buckets / SIZED)))
        warning = (f"mark buckets hold ~{records:,.0f} records each ({keys.mark_buckets:,} buckets): scripts copy "
                   f"every bucket they change, so visits cost Redis several times what they would at ~{SIZED}; "
                   f"a new crawl of this size wants PEERCRAWL_MARK_BUCKETS={min(want, MAX_MARK_BUCKETS)} "
                   "(docs/operations.md)")
    return {"buckets": keys.mark_buckets, "sampled": len(picks), "records_per_bucket": round(records, 1),
            "warning": warning}
