"""A crawl's shard and mark bucket counts live in Redis, so every process of a namespace agrees on them."""

from __future__ import annotations

import pytest

from crawler.errors import SettingsError, StoreError
from crawler.keys import Keys
from crawler.shard_layout import DEFAULT_MARK_BUCKETS, MAX_MARK_BUCKETS, MIN_MARK_BUCKETS
from crawler.store import layout
from tests.namespaces import delete_namespace


def test_a_new_crawl_records_the_configured_count_and_later_processes_read_it(client, namespace):
    assert layout.read(client, Keys(namespace)) is None
    assert layout.resolve(client, namespace, 8) == Keys(namespace, 8, rosters=True)
    assert layout.resolve(client, namespace, None) == Keys(namespace, 8, rosters=True)
    assert layout.resolve(client, namespace, 8).shards == 8


def test_an_unset_count_makes_a_one_shard_crawl(client, namespace):
    assert layout.resolve(client, namespace, None) == Keys(namespace, 1, rosters=True)
    with pytest.raises(SettingsError, match=r"PEERCRAWL_QUEUE_SHARDS is 4 .* has 1 shard: .*peercrawl reshard"):
        layout.resolve(client, namespace, 4)


def test_a_crawl_from_before_layouts_is_one_shard_whatever_is_configured(client, namespace):
    client.zadd(Keys(namespace).cooling, {"ab" * 20: 0})
    with pytest.raises(SettingsError, match="has 1 shard"):
        layout.resolve(client, namespace, 16)
    # and it may hold marks by (IP, torrent): not a crawl of rosters from its start
    assert layout.read(client, Keys(namespace)) == {"shards": 1, "counters": 1}
    assert not layout.resolve(client, namespace, None).rosters


def test_a_new_crawl_keeps_its_torrents_marks_in_rosters_and_says_so(client, namespace):
    """The recorder looks for marks by (IP, torrent) only in a crawl whose layout does not say it kept
    them in rosters from its start; one that says anything else than yes or no is damaged."""
    keys = layout.resolve(client, namespace, 2)
    assert keys.rosters and keys.home.rosters and layout.read(client, keys)["rosters"] is True
    client.set(keys.layout, b'{"shards": 2, "counters": 2}')  # a layout from before rosters
    assert not layout.resolve(client, namespace, None).rosters
    client.set(keys.layout, b'{"shards": 2, "counters": 2, "rosters": "yes"}')
    with pytest.raises(StoreError, match="layout in Redis is damaged"):
        layout.resolve(client, namespace, None)


def test_the_largest_count_is_allowed_and_a_damaged_layout_is_named(client, namespace):
    assert layout.resolve(client, namespace, 1024).shards == 1024
    client.set(Keys(namespace).layout, b'{"shards": 0}')
    with pytest.raises(StoreError, match="layout in Redis is damaged"):
        layout.resolve(client, namespace, None)
    client.set(Keys(namespace).layout, b"\xff")
    with pytest.raises(StoreError, match="damaged"):
        layout.read(client, Keys(namespace))


def test_a_new_crawl_records_its_mark_buckets_and_a_process_set_to_another_count_refuses(client, namespace):
    keys = layout.resolve(client, namespace, 2, 1 << 20)
    assert keys.mark_buckets == 1 << 20 and layout.read(client, Keys(namespace))["marks"] == 1 << 20
    assert layout.resolve(client, namespace, None).mark_buckets == 1 << 20  # unset: the crawl's own
    assert layout.resolve(client, namespace, None, 1 << 20) == keys
    with pytest.raises(SettingsError, match=r"^PEERCRAWL_MARK_BUCKETS is 4096 but namespace .* has 1048576 mark "
                                            r"buckets: unset it \(a crawl keeps its count"):
        layout.resolve(client, namespace, None, 4096)


def test_a_crawl_that_records_no_mark_buckets_has_the_count_every_crawl_had(client, namespace):
    client.set(Keys(namespace).layout, b'{"shards": 1, "counters": 1}')
    assert layout.resolve(client, namespace, None).mark_buckets == DEFAULT_MARK_BUCKETS
    assert layout.resolve(client, namespace, None, DEFAULT_MARK_BUCKETS).mark_buckets == DEFAULT_MARK_BUCKETS
    with pytest.raises(SettingsError, match="has 262144 mark buckets"):
        layout.resolve(client, namespace, None, 1 << 24)
    # nor does a crawl from before layouts: its marks are where the old count put them
    other = namespace + "-old"
    try:
        client.zadd(Keys(other).cooling, {"ab" * 20: 0})
        with pytest.raises(SettingsError, match="has 262144 mark buckets"):
            layout.resolve(client, other, None, 1 << 24)
    finally:
        delete_namespace(client, other)


@pytest.mark.parametrize("marks", [MIN_MARK_BUCKETS, MAX_MARK_BUCKETS])
def test_the_smallest_and_largest_mark_bucket_counts_are_recorded_and_a_damaged_one_is_named(client, namespace,
                                                                                              marks):
    assert layout.resolve(client, namespace, 1024, marks).mark_buckets == marks
    for damaged in (b'{"shards": 1, "marks": 12}', b'{"shards": 1, "marks": 4096.5}', b'{"shards": 1, "marks": "x"}'):
        client.set(Keys(namespace).layout, damaged)
        with pytest.raises(StoreError, match="layout in Redis is damaged"):
            layout.resolve(client, namespace, None)
