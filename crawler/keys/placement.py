"""Where a key lives on a crawl of several shards: a torrent's, an IP's, a place index's."""

from __future__ import annotations

import zlib


def shard_of(info_hash: str, shards: int) -> int:
    """The shard of a torrent: its info-hash, as a 160-bit number, modulo ``shards`` (digests are
    uniform; all bits count, so hand-made hashes that differ only at one end spread too)."""
    return int(info_hash, 16) % shards


def shard_of_fingerprint(fingerprint: int, shards: int) -> int:
    """The counter shard of an IP's place marks and counts: the top 24 bits of its 128-bit keyed
    fingerprint modulo ``shards`` (a torrent's counters live in ``shard_of`` the torrent).

    An IP's mark buckets come from the low bits of the fingerprint's high half (``counters/marks.py``:
    ``(high64 XOR torrent) mod buckets``), its mark fields from the low half: the shard is independent.
    """
    return (fingerprint >> 104) % shards


def total_shard(scope: tuple[str, ...], shards: int) -> int:
    """The shard whose counter totals hold the place index ``scope`` (``Keys.index``'s scope).

    Only place counters have totals (``counters/rollup.py``): their parts are spread by IP, while a
    torrent's counters live whole in its shard. A place index (bounded by the world's geography)
    lives whole in one shard, by a CRC of its scope: the first ``k`` of an index are one read.
    """
    return zlib.crc32(":".join(scope).encode("utf-8")) % shards


def index_tail(period: str, scope: tuple[str, ...]) -> str:
    """``<period>:<scope...>``: what follows ``ix:`` in an index key and ``tx:`` in its total;
    the rollup outbox names a place counter by it (``counters/rollup.outbox_field``)."""
    return ":".join((period, *scope))
