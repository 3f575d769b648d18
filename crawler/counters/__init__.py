"""Exact unique-IP counters (SPEC §4): recording visits and reading rankings.

- ``Recorder(client, keys, settings, locator)``: ``record_visit`` (one atomic
  Lua step per batch of (metric, IP) pairs), ``visited`` (torrents.processed),
  ``sweep`` (frees expired dedupe marks).
- ``top(...)``: the rankings behind ``peercrawl stats``.
- ``rollup``: with several shards, the place counters' totals (each place
  index whole in one shard), kept exact by a crash-safe rollup of every
  shard's parts; ``index_keys``, ``member_key``: where an index is read.
- ``names``: metric names, the escaping rule and the index layout.
- ``marks``: the fingerprint secret and the dedupe marks' buckets;
  ``calls`` and ``places``: the arguments of the probe.lua, record.lua and
  places.lua calls; ``geo_errors``: GeoIP errors (read errors, names over the bound), published and reported.
"""

from crawler.counters.marks import DEFAULT_BUCKETS, normalize_ip
from crawler.counters.names import Metric, escape, metrics_for, month_of, unescape
from crawler.counters.recorder import DEFAULT_BATCH_PAIRS, Recorder
from crawler.counters.stats import count, top

__all__ = [
    "DEFAULT_BATCH_PAIRS",
    "DEFAULT_BUCKETS",
    "Metric",
    "Recorder",
    "count",
    "escape",
    "metrics_for",
    "month_of",
    "normalize_ip",
    "top",
    "unescape",
]
