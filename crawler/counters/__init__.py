"""Exact unique-IP counters: recording visits, reading rankings, exporting them.

``recorder`` (``Recorder``) records visits' peers: each IP (``ip_forms``)
fingerprinted with a key kept out of Redis (``fingerprint_key``), checked
against its 30-day dedupe mark (``marks``: the mark format) and counted in
one atomic step per batch (``record.lua``, after the read-only
``probe.lua``), the StatHat increments added to the outbox in the same
step. ``script_args``, ``shard_keys``, ``packing`` and ``places`` build
their arguments; ``batcher`` records concurrent visits together;
``place_shards`` and ``rollup`` keep the counts exact across several
counter shards; ``names`` are the metric names and their indexes;
``rankings`` reads them for ``stats`` and the dashboard (the unplaced
peers beside the places), ``csv_export`` for ``export``;
``country_names`` maps countries to ISO codes and takes what a person
types for one; ``geo_errors`` tallies GeoIP errors. See the contract, §4.
"""

from crawler.counters.ip_forms import normalize_ip
from crawler.counters.names import Metric, escape, metrics_for, month_of, unescape
from crawler.counters.rankings import count, top
from crawler.counters.recorder import DEFAULT_BATCH_PAIRS, Recorder

__all__ = [
    "DEFAULT_BATCH_PAIRS",
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
