"""A crawl's shard count lives in Redis, so every process of a namespace agrees on it."""

from __future__ import annotations

import pytest

from crawler.errors import SettingsError, StoreError
from crawler.keys import Keys
from crawler.store import layout


def test_a_new_crawl_records_the_configured_count_and_later_processes_read_it(client, namespace):
    assert layout.read(client, Keys(namespace)) is None
    assert layout.resolve(client, namespace, 8) == Keys(namespace, 8)
    assert layout.resolve(client, namespace, None) == Keys(namespace, 8)
    assert layout.resolve(client, namespace, 8).shards == 8


def test_an_unset_count_makes_a_one_shard_crawl(client, namespace):
    assert layout.resolve(client, namespace, None) == Keys(namespace, 1)
    with pytest.raises(SettingsError, match=r"PEERCRAWL_QUEUE_SHARDS is 4 .* has 1 shard: .*peercrawl reshard"):
        layout.resolve(client, namespace, 4)


def test_a_crawl_from_before_layouts_is_one_shard_whatever_is_configured(client, namespace):
    client.zadd(Keys(namespace).cooling, {"ab" * 20: 0})
    with pytest.raises(SettingsError, match="has 1 shard"):
        layout.resolve(client, namespace, 16)
    assert layout.read(client, Keys(namespace)) == {"shards": 1, "counters": 1}


def test_the_largest_count_is_allowed_and_a_damaged_layout_is_named(client, namespace):
    assert layout.resolve(client, namespace, 1024).shards == 1024
    client.set(Keys(namespace).layout, b'{"shards": 0}')
    with pytest.raises(StoreError, match="layout in Redis is damaged"):
        layout.resolve(client, namespace, None)
    client.set(Keys(namespace).layout, b"\xff")
    with pytest.raises(StoreError, match="damaged"):
        layout.read(client, Keys(namespace))
