"""``status`` says how full the mark buckets are, and past ten times their size what a new crawl wants."""

from __future__ import annotations

import json
import random

import pytest

from crawler.counters.mark_fill import CROWDED, SAMPLES, mark_fill_report
from crawler.keys import Keys
from crawler.shard_layout import MAX_MARK_BUCKETS, MIN_MARK_BUCKETS
from tests.cli import run


def fill(client, keys: Keys, records: int) -> None:
    """Every mark bucket of the crawl's counter shards ``records`` records long."""
    per = keys.mark_buckets // keys.counter_shards
    pipe = client.pipeline(transaction=False)
    for shard in keys.all_counter_shards:
        for n in range(per):
            pipe.set(shard.mark_bucket(n), b"\x07" * 12 * records)
    pipe.execute()


def test_a_crowded_crawl_is_told_what_count_a_new_one_wants(test_env, client, namespace):
    env = dict(test_env, PEERCRAWL_MARK_BUCKETS=str(MIN_MARK_BUCKETS))
    got = json.loads(run(env, "status", "--json").stdout)["marks"]
    assert got == {"buckets": MIN_MARK_BUCKETS, "sampled": SAMPLES, "records_per_bucket": 0, "warning": None}
    fill(client, Keys(namespace, marks=MIN_MARK_BUCKETS), 1500)
    got = json.loads(run(env, "status", "--json").stdout)["marks"]
    assert got["records_per_bucket"] == 1500
    # 1,500 records in each of 1,024 buckets: ~100 each takes 15,360, the next power of two
    assert got["warning"].startswith("mark buckets hold ~1,500 records each (1,024 buckets)")
    assert "PEERCRAWL_MARK_BUCKETS=16384 (docs/operations.md)" in got["warning"]
    table = run(env, "status").stdout
    lines = [ln for ln in table.splitlines() if ln.startswith("mark buckets:")]
    assert len(lines) == 1 and "records each" in lines[0]
    assert "1,024, ~1,500 records each (of 64 read)" in table  # the queue table's row


def test_the_sample_spans_the_counter_shards_and_stops_short_of_warning_at_the_bound(client, namespace):
    keys = Keys(namespace, 4, marks=4096)
    fill(client, keys, CROWDED)
    got = mark_fill_report(client, keys, random.Random(7))
    assert got["records_per_bucket"] == CROWDED and got["warning"] is None
    last = keys.all_counter_shards[3]
    client.delete(*(last.mark_bucket(n) for n in range(1024)))  # one shard's buckets gone: a quarter of the sample
    assert mark_fill_report(client, keys, random.Random(7))["records_per_bucket"] == 0.75 * CROWDED


class FirstBuckets(random.Random):
    """Picks buckets 0-7 over and over: where a test wrote long ones among 2^30."""

    def randrange(self, *args, **kwargs) -> int:
        self.n = getattr(self, "n", -1) + 1
        return self.n % 8


@pytest.mark.parametrize("marks", [MIN_MARK_BUCKETS, MAX_MARK_BUCKETS])
def test_the_smallest_and_largest_counts_are_sampled_and_the_advice_stays_within_the_setting(client, namespace,
                                                                                             marks):
    keys = Keys(namespace, marks=marks)
    assert mark_fill_report(client, keys)["records_per_bucket"] == 0
    for n in range(8):
        client.set(keys.mark_bucket(n), b"\x07" * 12 * 2000)
    got = mark_fill_report(client, keys, FirstBuckets())
    assert got["buckets"] == marks and got["records_per_bucket"] == 2000
    want = min(MAX_MARK_BUCKETS, 1 << (2000 * marks // 100 - 1).bit_length())
    assert f"PEERCRAWL_MARK_BUCKETS={want} " in got["warning"]
