"""Reading whole hashes in HSCAN pages (crawler.store.hash_pages) against the real Redis."""

from __future__ import annotations

from crawler.store.hash_pages import read_hashes


def test_every_field_of_every_hash_is_read_whatever_its_size_or_encoding(client, keys):
    big = {f"f{i}".encode(): str(i).encode() for i in range(25_000)}  # a hash table, many pages
    small = {b"a": b"1", b"b": b"2"}  # a listpack: one page whatever the count
    client.hset(keys.scratch("big"), mapping=big)
    client.hset(keys.scratch("small"), mapping=small)
    got = read_hashes(client, {0: keys.scratch("big"), 1: keys.scratch("small"), 2: keys.scratch("none")}, count=300)
    assert got == {0: big, 1: small, 2: {}}
    assert read_hashes(client, {}) == {}
