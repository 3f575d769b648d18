"""The counters' keys (contract §4). Dedupe mark buckets, counter indexes and their totals, the
rollup between shards, GeoIP errors, and the place a misplaced fingerprint key is found."""

from __future__ import annotations

from crawler.keys.namespace import NamespaceKeys

# The first part (after the namespace) of every key below.
RESERVED = frozenset({'geoerrors', 'ix', 'mk', 'rx', 'secret', 'tx'})


class CounterKeys(NamespaceKeys):
    """The counters' keys (contract §4): dedupe mark buckets, counter indexes and their totals, the"""

    # --- counters, dedupe marks and StatHat (contract §4, §6) -----------------
    def mark_bucket(self, n: int) -> str:
        """STRING: dedupe mark bucket ``n`` (``mk:<n>``), 12-byte records of
        (8-byte keyed fingerprint, big-endian u32 unix second); see counters/marks.py."""
        return self.name_key("mk", str(n))

    @property
    def mark_bucket_prefix(self) -> str:
        """``mark_bucket(n)`` without its ``n``: what loops building many bucket keys append ``n`` to."""
        return self.name_key("mk", "")

    @property
    def mark_buckets_match(self) -> str:
        """SCAN MATCH pattern of every mark bucket (``mk:[0-9]*``; not the sweep cursor)."""
        return self.name_key("mk", "[0-9]*")

    @property
    def sweep_cursor(self) -> str:
        """STRING integer: the bucket number the next sweep of stale marks starts at
        (INCRBY, shared by every worker; taken modulo the bucket count)."""
        return self.name_key("mk", "sweep")

    def index(self, period: str, scope: tuple[str, ...]) -> str:
        """One counter index ``ix:<period>:<scope...>`` (counters/names.py).

        ``period`` is ``all`` (lifetime) or ``YYYY-MM``; ``scope`` the family and
        its narrowing, e.g. ``("cities", "c", "Germany")``. A ZSET member -> count,
        except one torrent's indexes (``(family, "t", <info-hash>)``): a HASH
        member -> count, its three families in the countries' one
        (``counters/torrent_index.py``; a cities' or postcodes' of its own is
        an earlier crawl's, read, never written).
        """
        return self.name_key("ix", period, *scope)

    def torrent_index_prefix(self, period: str) -> str:
        """``index(period, ("countries", "t", h))`` without its ``h``: the hash holding the torrent's
        three families (``counters/torrent_index.py``), which a recording, naming a torrent's two
        a visit, appends the info-hash to."""
        return self.name_key("ix", period, "countries", "t", "")

    def total(self, period: str, scope: tuple[str, ...]) -> str:
        """One index of counter totals ``tx:<period>:<scope...>`` (crawls of more than one shard).

        The same shape and members as the place ``index`` of ``scope``, holding the sum
        over every shard's part, in the shard ``total_shard`` names; kept by
        ``counters/rollup.py``, read by ``stats`` and ``export``.
        """
        return self.name_key("tx", period, *scope)

    @property
    def rollup_outbox(self) -> str:
        """HASH place counter -> count not yet in the totals (``rx:outbox``; more than one shard),
        written by places.lua with the shard's marks; a field is ``rollup.outbox_field``."""
        return self.name_key("rx", "outbox")

    @property
    def rollup_in_flight(self) -> str:
        """HASH: the rollup batch being added to the totals (``rx:inflight``; same fields as ``rollup_outbox``)."""
        return self.name_key("rx", "inflight")

    @property
    def rollup_seq(self) -> str:
        """STRING integer: the number of this shard's latest rollup batch (``rx:seq``; the one in
        flight while ``rollup_in_flight`` exists)."""
        return self.name_key("rx", "seq")

    @property
    def rollup_taken(self) -> str:
        """STRING: Redis ms when the rollup batch in flight was taken (``rx:taken``); the
        workers' settle leaves a younger batch to the reader adding it."""
        return self.name_key("rx", "taken")

    @property
    def rollup_applied(self) -> str:
        """HASH source shard -> ``batch * 65536 + chunk``: the last chunk of each shard's rollup
        batches added to this shard's totals (``rx:applied``), so a retried chunk adds nothing."""
        return self.name_key("rx", "applied")

    @property
    def geo_errors(self) -> str:
        """HASH errors (lookups that failed on a damaged GeoIP database, in total),
        last (the last error, no address), at (its unix time)."""
        return self.name_home_key("geoerrors")

    @property
    def secret(self) -> str:
        """STRING: a fingerprint key found in Redis; never written, read only to refuse to record while it is
        there and to move it out (``peercrawl secret --move``): the key never lives in Redis (contract §4)."""
        return self.name_home_key("secret")
