"""Recording one visit's peers into the unique-IP counters (SPEC §4, §6).

Strategy: Python does the cheap, stateless part (normalise IPs, geolocate,
derive the §4 metrics, fingerprint every (metric, IP) pair, group the keys);
one Lua call (``record.lua``) per batch does the whole check-mark-increment
atomically for up to ``batch_pairs`` pairs: marks for new pairs, one
ZINCRBY per (metric, index) with the batch's total, and the StatHat outbox
increment. A batch never splits an IP's metrics, so a visit of 200 peers
(~1,400 pairs) costs two round trips, and a crash between batches leaves
every finished batch counted and the rest not: a retry counts exactly the
rest (its pairs' marks are already there).
"""

from __future__ import annotations

import ipaddress
import math
import struct
from typing import Iterable

import redis

from crawler import logs
from crawler.counters.marks import DEFAULT_BUCKETS, Fingerprinter, bucket_key, load_secret, normalize_ip
from crawler.counters.names import LIFETIME, Metric, info_hash_hex, metrics_for, month_of
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.lua import register

log = logs.get("counters")

# ~1,400 pairs held Redis ~5 ms in one call; 800 keeps a call near 3 ms.
DEFAULT_BATCH_PAIRS = 800
# Buckets one sweep call examines (~100 fields each): ~1-2 ms of Redis.
SWEEP_CALL_BUCKETS = 64


def outbox_key(keys: Keys) -> str:
    """HASH stat name -> pending StatHat count."""
    return keys.sub("sh", "outbox")


def index_key(keys: Keys, period: str, scope: tuple[str, ...]) -> str:
    """ZSET of one index: ``period`` is ``all`` or ``YYYY-MM``."""
    return keys.sub("ix", period, *scope)


class Recorder:
    """Records visits' peers into the §4 counters.

    ``client``: a redis-py client; ``keys``: the namespace's ``Keys``;
    ``settings``: uses ``secret``, ``dedupe_seconds``, ``stathat_ezkey`` and
    ``stathat_families``. ``locator``: a ``geo.Locator`` (default: one built
    from ``settings``, which may raise ``GeoError``). ``mark_buckets`` and
    ``batch_pairs``: see ``marks`` and the module note.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings,
        locator=None,
        *,
        mark_buckets: int = DEFAULT_BUCKETS,
        batch_pairs: int = DEFAULT_BATCH_PAIRS,
    ):
        if locator is None:
            from geo import Locator

            locator = Locator(settings)
        self.client, self.keys, self.settings, self.locator = client, keys, settings, locator
        self.batch_pairs = max(8, batch_pairs)
        self.window = int(math.ceil(settings.dedupe_seconds))
        try:
            secret = load_secret(client, keys, settings.secret)
        except redis.RedisError as e:
            raise StoreError(f"cannot read the fingerprint secret: {e}") from e
        self.fingerprints = Fingerprinter(secret, mark_buckets)
        posting = settings.stathat_ezkey is not None
        families = set(settings.stathat_families)
        self._post_countries = posting and "countries" in families
        self._post_torrents = posting and "torrents" in families
        self._post_processed = posting and "torrents.processed" in families
        self._outbox = outbox_key(keys)
        self._record = register(client, "record", package=__package__)
        self._sweep = register(client, "sweep", package=__package__)
        self._visited = register(client, "visited", package=__package__)
        self._sweep_cursor = keys.sub("mk", "sweep")
        self._index_keys: dict = {}
        self._bucket_keys: dict = {}

    # --- recording --------------------------------------------------------
    def record_visit(self, info_hash: str, ips: Iterable[str], now: float) -> int:
        """Record ``ips`` (text form) seen on ``info_hash`` at unix time ``now``.

        Returns how many IPs were new for ``torrents.<info-hash>.users`` (the
        ``new`` of §2). Strings that are not IPs are ignored. Raises
        ``ValueError`` for a bad info-hash, ``StoreError`` if Redis fails
        (batches already done stay counted; recording again is safe).
        """
        located = []
        seen: set[bytes] = set()
        for ip in ips:
            packed = normalize_ip(ip)
            if packed is None or packed in seen:
                continue
            seen.add(packed)
            located.append((packed, self.locator.locate(_text(packed))))
        return self.record_places(info_hash, located, now)

    def record_places(self, info_hash: str, located: Iterable[tuple[bytes, object]], now: float) -> int:
        """``record_visit`` with IPs already packed and located: ``(packed_ip, Place)`` pairs.

        Pairs must hold distinct IPs. Returns the ``new`` of §2.
        """
        h = info_hash_hex(info_hash)
        fps = self.fingerprints
        n_buckets = fps.buckets
        by_place: dict = {}  # a visit's peers share few places
        batch = _Batch()
        new = 0
        for packed, place in located:
            key = (place.country, place.city, place.postcode)
            ms = by_place.get(key)
            if ms is None:
                ms = by_place[key] = [(m, fps.metric(m.name)) for m in metrics_for(h, *key)]
            if batch.pairs and batch.pairs + len(ms) > self.batch_pairs:
                new += self._run(batch, now)
                batch = _Batch()
            ip_fp = fps.ip(packed)
            batch.add_ip((ip_fp >> 64) % n_buckets, [(m, (ip_fp ^ m_fp) & _LOW64) for m, m_fp in ms])
        if batch.pairs:
            new += self._run(batch, now)
        return new

    def _run(self, batch: "_Batch", now: float) -> int:
        """Run ``record.lua`` on ``batch``; returns the count of its torrents.<h>.users metric."""
        now_s = int(now)
        month = month_of(now)
        keys: list[str] = [self._outbox]
        positions: dict = {}
        table = bytearray()
        for metric in batch.metrics:
            table += _str(metric.name if self._posted(metric) else "")
            table.append(len(metric.indexes))
            for scope, member in metric.indexes:
                p = positions.get(scope)
                if p is None:
                    keys.append(self._index_key(LIFETIME, scope))
                    keys.append(self._index_key(month, scope))
                    p = positions[scope] = len(keys) - 1
                table += p.to_bytes(2, "big") + _str(member)
        pairs = bytearray()
        for bucket, marks in batch.ips:
            p = positions.get(bucket)
            if p is None:
                keys.append(self._bucket_key(bucket))
                p = positions[bucket] = len(keys)
            pairs += _IP.pack(p, len(marks))
            for field, m in marks:
                pairs += _PAIR.pack(field, m)
        if len(keys) > 65535:  # pragma: no cover - batch_pairs keeps it far below
            raise ValueError("batch too large")
        try:
            counts = self._record(keys=keys, args=[now_s, now_s - self.window, bytes(table), bytes(pairs)])
        except redis.RedisError as e:
            raise StoreError(f"recording peers failed: {e}") from e
        # The torrent's own users metric (scope ("torrents",)) gives §2's `new`.
        return sum(c for metric, c in zip(batch.metrics, counts) if metric.indexes[0][0] == ("torrents",))

    def _index_key(self, period: str, scope: tuple) -> str:
        k = (period, scope)
        key = self._index_keys.get(k)
        if key is None:
            if len(self._index_keys) > 100_000:  # bounded: a worker sees many torrents
                self._index_keys.clear()
            key = self._index_keys[k] = index_key(self.keys, period, scope)
        return key

    def _bucket_key(self, n: int) -> str:
        key = self._bucket_keys.get(n)
        if key is None:
            key = self._bucket_keys[n] = bucket_key(self.keys, n)
        return key

    def _posted(self, metric: Metric) -> bool:
        return self._post_countries if metric.family == "countries" else self._post_torrents

    # --- torrents.processed ----------------------------------------------
    def visited(self, info_hash: str, now: float) -> bool:
        """Note one visit of ``info_hash`` for ``torrents.processed`` (StatHat).

        Counts each torrent at most once per UTC clock hour. Returns True when
        this visit added 1 to the outbox; always False when StatHat is off.
        """
        if not self._post_processed:
            return False
        hour = int(now) // 3600
        try:
            return bool(
                self._visited(
                    keys=[self.keys.sub("sh", "processed", str(hour)), self._outbox],
                    args=[info_hash_hex(info_hash), 2 * 3600],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"recording a visit failed: {e}") from e

    # --- memory -----------------------------------------------------------
    def sweep(self, budget: int = 1024, now: float | None = None) -> int:
        """Remove expired marks from the next ``budget`` buckets; returns fields removed.

        Workers share one cursor (INCRBY), so concurrent sweepers take
        different buckets; a full pass over 2**18 buckets at 1,024 per flush
        cycle of 10 s takes ~45 minutes, well inside the 30-day window.
        ``now`` defaults to the Redis server's clock.
        """
        n = self.fingerprints.buckets
        budget = max(1, min(budget, n))
        try:
            if now is None:
                now = self.client.time()[0]
            start = self.client.incrby(self._sweep_cursor, budget) - budget
            cutoff = int(now) - self.window
            removed = 0
            buckets = [(start + i) % n for i in range(budget)]
            for i in range(0, len(buckets), SWEEP_CALL_BUCKETS):
                chunk = [bucket_key(self.keys, b) for b in buckets[i : i + SWEEP_CALL_BUCKETS]]
                removed += self._sweep(keys=chunk, args=[cutoff])
            return removed
        except redis.RedisError as e:
            raise StoreError(f"sweeping dedupe marks failed: {e}") from e


class _Batch:
    """Metrics and, per IP, its bucket and (field, metric number) marks, for one Lua call."""

    __slots__ = ("metrics", "numbers", "ips", "pairs")

    def __init__(self):
        self.metrics: list[Metric] = []
        self.numbers: dict[str, int] = {}
        self.ips: list[tuple[int, list[tuple[int, int]]]] = []
        self.pairs = 0

    def add_ip(self, bucket: int, marks: list[tuple[Metric, int]]) -> None:
        out = []
        for metric, field in marks:
            m = self.numbers.get(metric.name)
            if m is None:
                self.metrics.append(metric)
                m = self.numbers[metric.name] = len(self.metrics)
            out.append((field, m))
        self.ips.append((bucket, out))
        self.pairs += len(out)


_IP = struct.Struct(">HB")  # mark key position, number of marks
_PAIR = struct.Struct(">QH")  # field, metric number
_LOW64 = (1 << 64) - 1


def _str(s: str) -> bytes:
    """A length-prefixed UTF-8 string as record.lua reads it."""
    b = s.encode("utf-8")
    return len(b).to_bytes(2, "big") + b


def _text(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))
