"""The arguments of one visit's probe.lua and record.lua calls, built IP by IP.

``ShardKeys`` holds one counter shard's keys, ``VisitPart`` the IPs of a
visit in one shard; ``ProbeCall`` holds one probe.lua call (at most
``recorder.PROBE_IPS`` IPs); ``RecordBatch`` one record.lua call (at most ``batch_pairs`` (metric,
IP) pairs, never splitting an IP's metrics). Both number the mark buckets
they pass, so a record names its buckets by a small index into KEYS. The
layouts are those of the scripts' headers (``crawler/counters/*.lua``).
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.counters.names import LIFETIME
from crawler.counters.places import PlaceInfo


class ProbeCall:
    """The arguments of one probe.lua call."""

    __slots__ = ("args", "bnumbers", "buckets", "n")

    def __init__(self):
        self.buckets: list = []
        self.bnumbers: dict = {}
        self.args = bytearray()
        self.n = 0


class RecordBatch:
    """The arguments of one record.lua call, built IP by IP.

    ``fixed``: the outbox and index keys every call of the visit gets;
    ``month``: the visit's month (``names.month_of``).
    """

    __slots__ = ("bnumbers", "buckets", "countries", "country_numbers", "heads", "ips", "keys", "month", "pairs",
                 "places")

    def __init__(self, fixed: list, month: str):
        self.keys, self.month = list(fixed), month
        self.buckets: list = []  # mark bucket keys, after ``keys``
        self.bnumbers: dict = {}  # bucket number -> 1-based index in ``buckets``
        self.countries, self.country_numbers = bytearray(), {}
        self.places, self.heads = bytearray(), {}  # place tuple -> its IPs' header bits
        self.ips = bytearray()
        self.pairs = 0

    def add_place(self, pkey: tuple, info: PlaceInfo, country_keys: Callable[[str, str], list]) -> int:
        """Number the place (and its country) in this batch; returns its IPs' header bits.

        ``country_keys(country, month)``: the six per-country index keys
        record.lua gets for a country new to this batch.
        """
        c = 0
        if info.country is not None:
            c = self.country_numbers.get(info.country)
            if c is None:
                pos = len(self.keys) + 1
                self.keys += country_keys(info.country, self.month)
                self.countries += pos.to_bytes(2, "big") + info.country_s
                c = self.country_numbers[info.country] = len(self.country_numbers) + 1
        self.places += c.to_bytes(2, "big") + info.tail
        n = len(self.heads) + 1
        head = self.heads[pkey] = ((n << 8) | info.k) << info.shift
        return head


class ShardKeys:
    """One counter shard's keys as the recorder passes them (bytes, built once and cached).

    ``keys``: the shard's ``Keys``; ``rollup``: whether the crawl has several
    shards, so record.lua also writes the shard's rollup outbox (its KEYS[12],
    after the outbox and the ten index keys).
    """

    __slots__ = ("_buckets", "_countries", "_indexes", "keys", "outbox", "rollup", "tail", "torrents")

    def __init__(self, keys, rollup: bool):
        self.keys, self.rollup = keys, rollup
        self.outbox = keys.outbox.encode()
        self.torrents = keys.index(LIFETIME, ("torrents",)).encode()
        self.tail = keys.index_tail_at if rollup else 0
        self._buckets: dict = {}
        self._indexes: dict = {}
        self._countries: dict = {}

    def bucket(self, n: int) -> bytes:
        """The key of mark bucket ``n``."""
        key = self._buckets.get(n)
        if key is None:
            key = self._buckets[n] = self.keys.mark_bucket(n).encode()
        return key

    def index(self, period: str, scope: tuple) -> bytes:
        """The key of one counter index (bytes: redis-py sends them as is)."""
        k = (period, scope)
        key = self._indexes.get(k)
        if key is None:
            if len(self._indexes) > 100_000:  # bounded: a worker sees many torrents
                self._indexes.clear()
            key = self._indexes[k] = self.keys.index(period, scope).encode()
        return key

    def fixed(self, h: str, month: str) -> list:
        """The outbox and the 10 index keys every record.lua call of a visit gets (and the rollup outbox)."""
        keys = [self.outbox]
        for scope in (("torrents",), ("countries",),
                      ("countries", "t", h), ("cities", "t", h), ("postcodes", "t", h)):
            keys.append(self.index(LIFETIME, scope))
            keys.append(self.index(month, scope))
        if self.rollup:
            keys.append(self.keys.rollup_outbox.encode())
        return keys

    def country_keys(self, country: str, month: str) -> list:
        """The six per-country index keys record.lua gets for ``country`` (see its header)."""
        k = (country, month)
        got = self._countries.get(k)
        if got is None:
            if len(self._countries) > 10_000:  # bounded: ~250 countries a month
                self._countries.clear()
            got = self._countries[k] = [
                self.index(period, (family, "c", country))
                for family in ("torrents", "cities", "postcodes") for period in (LIFETIME, month)]
        return got


class VisitPart:
    """The IPs of one visit that belong to one counter shard, and its probe.lua calls.

    ``rows``: per IP ``(place tuple, (PlaceInfo, lanes, probe lane),
    fingerprint, bucket of (IP, torrent))``; ``order``: each row's position
    among the visit's distinct IPs (kept only when asked, for ``probe``).
    """

    __slots__ = ("order", "probe", "probes", "rows", "shard")

    def __init__(self, shard: ShardKeys):
        self.shard = shard
        self.rows: list = []
        self.order: list = []
        self.probe = ProbeCall()
        self.probes = [self.probe]
