"""``peercrawl export``: every unique-IP counter, lifetime and months, as CSV files.

One file per family (contract §4), each row one counter: its metric name exactly
as ``stats`` prints it (month counters end in ``.<YYYY-MM>``), its period
(``all`` or ``YYYY-MM``), the parts of the name unescaped for spreadsheets
(``St. Louis``), and the count; ``torrents.csv`` also each torrent's name, when
the caller hands a way to read them (the queue keeps them: ``names``, one
round trip per slice of rows). Names are GeoIP's and torrents' authors', third
parties': a cell a spreadsheet would read as a formula (``=HYPERLINK(...)``)
is written with a leading ``'`` (``crawler.safe_text.csv_row``), every other
character as stored. Strategy: every counter lives in an index
(``crawler.counters.names``), so walking the indexes finds them all without
scanning the keyspace: the countries index gives the per-country city and
postcode indexes, the torrents index the per-torrent ones. Large indexes are
read in slices and files are written as they are read, so memory stays flat
with millions of torrents. A crawl of several shards is read from its
totals (``crawler.counters.rollup``, settled first): the same indexes, the
``torrents`` family's spread over the shards and merged as read, in the
order one shard gives.
"""

from __future__ import annotations

import csv
import datetime as _dt
import heapq
import time
from collections.abc import Callable, Sequence
from itertools import islice
from pathlib import Path
from typing import cast

import redis

from crawler.counters import torrent_index
from crawler.counters.names import LIFETIME, is_place, metric_of, query_for, read_metric, unescape
from crawler.counters.rollup import Rollup, index_keys, sharded
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.safe_text import csv_row

# How far back month counters are looked for.
MONTHS_BACK = 120
# Members per ZRANGE slice and torrents per pipelined HGETALL round.
SLICE = 10_000
TORRENTS_PER_ROUND = 500

FILES = {
    "countries": ("country",),
    "cities": ("country", "city"),
    "postcodes": ("country", "postcode"),
    "torrents": ("info_hash", "name"),
    "torrent_countries": ("info_hash", "country"),
    "torrent_cities": ("info_hash", "country", "city"),
    "torrent_postcodes": ("info_hash", "country", "postcode"),
}


def months_with_counters(client: redis.Redis, keys: Keys, now: float | None = None) -> list[str]:
    """The months (``YYYY-MM``, newest first, up to ``MONTHS_BACK`` back) that have month counters.

    Every recorded IP counts for a torrent, so a month has counters when a
    counter shard has its ``torrents`` index (one pipelined EXISTS per shard
    and month).
    """
    now = time.time() if now is None else now
    d = _dt.datetime.fromtimestamp(now, _dt.UTC)
    y, m = d.year, d.month
    cands = []
    for _ in range(MONTHS_BACK):
        cands.append(f"{y:04d}-{m:02d}")
        y, m = (y, m - 1) if m > 1 else (y - 1, 12)
    shards = keys.all_counter_shards
    p = client.pipeline(transaction=False)
    for month in cands:
        for s in shards:
            p.exists(s.index(month, ("torrents",)))
    try:
        got = p.execute()
    except redis.RedisError as e:
        raise StoreError(f"reading the months failed: {e}") from e
    n = len(shards)
    return [month for i, month in enumerate(cands) if any(got[i * n : (i + 1) * n])]


def export(client: redis.Redis, keys: Keys, out: Path, now: float | None = None,
           names: Callable[[Sequence[str]], list[str | None]] | None = None) -> dict[str, int]:
    """Write ``<out>/<family>.csv`` for every family; returns rows written per file.

    ``names``: the names of a slice of torrents (info-hashes in, one name or
    None each out) for ``torrents.csv``'s ``name`` column; None leaves it empty.
    Raises ``StoreError`` if Redis fails, ``OSError`` if a file cannot be written.
    """
    out.mkdir(parents=True, exist_ok=True)
    if sharded(keys):
        Rollup(client, keys).settle()
    periods = [LIFETIME] + sorted(months_with_counters(client, keys, now))
    counts = {}
    files = {name: (out / f"{name}.csv").open("w", newline="", encoding="utf-8") for name in FILES}
    try:
        writers = {name: csv.writer(f, lineterminator="\n") for name, f in files.items()}
        for name, cols in FILES.items():
            writers[name].writerow(csv_row(("metric", "period", *cols, "count")))
            counts[name] = 0
        try:
            (ckey,) = index_keys(keys, LIFETIME, ("countries",))
            # bytes members: the client decodes no replies (redis-py's types cannot tell)
            countries = [c.decode() for c in cast(list[bytes], client.zrange(ckey, 0, -1)) if is_place(c)]
            for period in periods:
                w = _Writer(client, keys, period, writers, counts)
                w.index("countries", query_for("countries"))
                for c in countries:
                    for fam in ("cities", "postcodes"):
                        w.index(fam, query_for(fam, country=unescape(c)))
                w.index("torrents", query_for("torrents"), keep=True, names=names or _no_names)
                w.torrents()
        except redis.RedisError as e:
            raise StoreError(f"reading counters failed: {e}") from e
    finally:
        for f in files.values():
            f.close()
    return counts


class _Writer:
    """Writes the counters of one period."""

    def __init__(self, client, keys, period, writers, counts):
        self.client, self.keys, self.period = client, keys, period
        self.writers, self.counts = writers, counts
        self.suffix = "" if period == LIFETIME else "." + period
        self.hashes: list[str] = []

    def index(self, name: str, q, keep: bool = False,
              names: Callable[[Sequence[str]], list[str | None]] | None = None) -> None:
        """Every member of one sorted-set index, largest first (ZREVRANGE's order), in slices;
        ``keep``: remember them; ``names``: each member's name, as a last part (read per
        ``TORRENTS_PER_ROUND`` rows). An index spread over several shards' totals is
        merged as it is read (each shard read in slices, ``SLICE`` in all)."""
        keys = index_keys(self.keys, self.period, q.scope)
        w = self.writers[name]
        streams = [_slices(self.client, k, max(100, SLICE // len(keys))) for k in keys]
        rows = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda r: (-r[1], _Desc(r[0])))
        rows = (r for r in rows if is_place(r[0]))  # the member of the unplaced is no place
        while chunk := [(m.decode(), n) for m, n in islice(rows, TORRENTS_PER_ROUND)]:
            shown = names([m for m, _ in chunk]) if names is not None else None
            for i, (member, n) in enumerate(chunk):
                extra = () if shown is None else (shown[i] or "",)
                metric = metric_of(q, member) + self.suffix
                w.writerow(csv_row((metric, self.period, *_parts(name, metric), *extra, int(n))))
                if keep:
                    self.hashes.append(member)
            self.counts[name] += len(chunk)

    def torrents(self) -> None:
        """Each torrent's own indexes (hashes): its countries, cities and postcodes."""
        fams = (("countries", "torrent_countries"), ("cities", "torrent_cities"), ("postcodes", "torrent_postcodes"))
        for i in range(0, len(self.hashes), TORRENTS_PER_ROUND):
            chunk = self.hashes[i : i + TORRENTS_PER_ROUND]
            p = self.client.pipeline(transaction=False)
            for h in chunk:
                torrent_index.read_all(p, self.keys, self.period, h)
            got = p.execute()
            for j, h in enumerate(chunk):
                by_family = torrent_index.split(got[3 * j : 3 * j + 3])
                for fam, name in fams:
                    q = query_for(fam, torrent=h)
                    w = self.writers[name]
                    places = {m: n for m, n in by_family[fam].items() if is_place(m)}
                    for m, n in sorted(places.items(), key=lambda kv: (-kv[1], kv[0])):
                        metric = metric_of(q, m.decode()) + self.suffix
                        w.writerow(csv_row((metric, self.period, *_parts(name, metric), n)))
                    self.counts[name] += len(places)


def _parts(file: str, metric: str) -> list[str]:
    """The name's parts of ``metric`` for ``file``'s columns, unescaped (``names.read_metric``: the
    decoding ``stats`` and the dashboard show too); a torrent's own name is not among them."""
    got = read_metric(metric)
    return [got[c] for c in FILES[file] if c != "name"]


def _no_names(hashes: Sequence[str]) -> list[str | None]:
    """No torrent's name: ``torrents.csv``'s ``name`` column left empty."""
    return [None] * len(hashes)


def _slices(client: redis.Redis, key: str, size: int):
    """``(member, count)`` of one sorted set, largest first (ties: member descending), read ``size`` at a time."""
    start = 0
    while True:
        got = client.zrevrange(key, start, start + size - 1, withscores=True)
        yield from got
        if len(got) < size:
            return
        start += size


class _Desc:
    """Bytes ordered backwards: ZREVRANGE's order of equal counts, for merging shards' slices."""

    __slots__ = ("b",)

    def __init__(self, b: bytes):
        self.b = b

    def __lt__(self, other: _Desc) -> bool:
        return self.b > other.b
