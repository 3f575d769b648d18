"""The arguments of one visit's probe.lua and record.lua calls, built IP by IP.

``ProbeCall`` holds one probe.lua call (at most ``recorder.PROBE_IPS``
IPs); ``RecordBatch`` one record.lua call (at most ``batch_pairs`` (metric,
IP) pairs, never splitting an IP's metrics). Both number the mark buckets
they pass, so a record names its buckets by a small index into KEYS. The
layouts are those of the scripts' headers (``crawler/counters/*.lua``).
"""

from __future__ import annotations

from collections.abc import Callable

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
