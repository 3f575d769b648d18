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
from collections.abc import Iterable

import redis

from crawler import logs
from crawler.counters.marks import (
    DEFAULT_BUCKETS,
    Fingerprinter,
    bucket_key,
    load_secret,
    normalize_ip,
)
from crawler.counters.names import LIFETIME, escape, info_hash_hex, month_of
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
        self._outbox_b = self._outbox.encode()
        self._record = register(client, "record", package=__package__)
        self._sweep = register(client, "sweep", package=__package__)
        self._visited = register(client, "visited", package=__package__)
        self._sweep_cursor = keys.sub("mk", "sweep")
        self._index_keys: dict = {}
        self._bucket_keys: dict = {}
        self._places: dict = {}
        self._post = ("c" if self._post_countries else "-") + ("t" if self._post_torrents else "-")

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
        t_fp = fps.torrent(h)
        month = month_of(now)
        batch = self._new_batch(h, month, now)
        visit_places: dict = {}  # place tuple -> (k, metric fingerprints, Place info)
        new = 0
        for packed, place in located:
            pkey = (place.country, place.city, place.postcode)
            vp = visit_places.get(pkey)
            if vp is None:
                info = self._place_info(pkey)
                vp = visit_places[pkey] = (info, [t_fp] + [g ^ t_fp if t else g for g, t in info.fps])
            info, mfps = vp
            k = len(mfps)
            if batch.pairs and batch.pairs + k > self.batch_pairs:
                new += self._run(batch)
                batch = self._new_batch(h, month, now)
            ip_fp = fps.ip(packed)
            lo = ip_fp & _LOW64
            bucket = (ip_fp >> 64) % n_buckets
            bpos = batch.positions.get(bucket)
            if bpos is None:
                batch.keys.append(self._bucket_key(bucket))
                bpos = batch.positions[bucket] = len(batch.keys)
            pno = batch.place_numbers.get(pkey)
            if pno is None:
                pno = batch.add_place(pkey, info, self)
            batch.ips += _IP_STRUCTS[k].pack(bpos, pno, *[lo ^ m for m in mfps])
            batch.pairs += k
        if batch.pairs:
            new += self._run(batch)
        return new

    def _new_batch(self, h: str, month: str, now: float) -> _Batch:
        keys = [self._outbox_b]
        for scope in (("torrents",), ("countries",), ("cities",), ("postcodes",),
                      ("countries", "t", h), ("cities", "t", h), ("postcodes", "t", h)):
            keys.append(self._index_key(LIFETIME, scope))
            keys.append(self._index_key(month, scope))
        return _Batch(h, month, int(now), keys)

    def _place_info(self, pkey: tuple) -> _PlaceInfo:
        """Escaped names and metric fingerprints of a place (cached per process)."""
        info = self._places.get(pkey)
        if info is None:
            if len(self._places) > 100_000:  # bounded: the world has ~100k cities
                self._places.clear()
            info = self._places[pkey] = _PlaceInfo(pkey, self.fingerprints)
        return info

    def _run(self, batch: _Batch) -> int:
        """Run ``record.lua`` on ``batch``; returns its count of torrents.<h>.users."""
        if len(batch.keys) > 65535:  # pragma: no cover - batch_pairs keeps it far below
            raise ValueError("batch too large")
        args = [
            batch.now, batch.now - self.window, batch.h, self._post,
            bytes(batch.countries), bytes(batch.cities), bytes(batch.postcodes),
            bytes(batch.places), bytes(batch.ips),
        ]
        try:
            return int(self._record(keys=batch.keys, args=args))
        except redis.RedisError as e:
            raise StoreError(f"recording peers failed: {e}") from e

    def _index_key(self, period: str, scope: tuple) -> bytes:
        k = (period, scope)
        key = self._index_keys.get(k)
        if key is None:
            if len(self._index_keys) > 100_000:  # bounded: a worker sees many torrents
                self._index_keys.clear()
            key = self._index_keys[k] = index_key(self.keys, period, scope).encode()  # bytes: redis-py sends them as is
        return key

    def _bucket_key(self, n: int) -> bytes:
        key = self._bucket_keys.get(n)
        if key is None:
            key = self._bucket_keys[n] = bucket_key(self.keys, n).encode()
        return key

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


class _PlaceInfo:
    """A place's escaped names and its metric fingerprints, in record.lua's slot order.

    ``fps`` lists ``(fingerprint, is_torrent_metric)`` after the torrent's
    own users metric: country, torrent-country, city, torrent-city,
    postcode, torrent-postcode (the parts the place has). A torrent metric's
    fingerprint is XORed with the torrent's per visit.
    """

    __slots__ = ("city", "country", "fps", "postcode")

    def __init__(self, pkey: tuple, fps: Fingerprinter):
        c = escape(pkey[0])
        y = escape(pkey[1]) if c is not None else None
        z = escape(pkey[2]) if c is not None else None
        self.country, self.city, self.postcode = c, y, z
        out: list[tuple[int, bool]] = []
        if c is not None:
            name = f"countries.{c}"
            out += [(fps.place(name), False), (fps.place("t" + name), True)]
            for family, part in (("cities", y), ("postcodes", z)):
                if part is not None:
                    name = f"countries.{c}.{family}.{part}"
                    out += [(fps.place(name), False), (fps.place("t" + name), True)]
        self.fps = out


class _Batch:
    """The arguments of one record.lua call, built IP by IP."""

    __slots__ = (
        "cities",
        "city_numbers",
        "countries",
        "country_numbers",
        "h",
        "ips",
        "keys",
        "month",
        "now",
        "pairs",
        "place_numbers",
        "places",
        "positions",
        "postcode_numbers",
        "postcodes",
    )

    def __init__(self, h: str, month: str, now: int, keys: list):
        self.h, self.month, self.now, self.keys = h, month, now, keys
        self.positions: dict = {}  # bucket number -> key position
        self.countries, self.country_numbers = bytearray(), {}
        self.cities, self.city_numbers = bytearray(), {}
        self.postcodes, self.postcode_numbers = bytearray(), {}
        self.places, self.place_numbers = bytearray(), {}
        self.ips = bytearray()
        self.pairs = 0

    def add_place(self, pkey: tuple, info: _PlaceInfo, rec: Recorder) -> int:
        """Number the place (and its country, city, postcode) in this batch."""
        c = y = z = 0
        if info.country is not None:
            c = self.country_numbers.get(info.country)
            if c is None:
                pos = len(self.keys) + 1
                for family in ("torrents", "cities", "postcodes"):
                    scope = (family, "c", info.country)
                    self.keys.append(rec._index_key(LIFETIME, scope))
                    self.keys.append(rec._index_key(self.month, scope))
                self.countries += pos.to_bytes(2, "big") + _str(info.country)
                c = self.country_numbers[info.country] = len(self.country_numbers) + 1
            if info.city is not None:
                y = self._number(self.city_numbers, self.cities, c, info.city)
            if info.postcode is not None:
                z = self._number(self.postcode_numbers, self.postcodes, c, info.postcode)
        self.places += _PLACE.pack(c, y, z)
        n = self.place_numbers[pkey] = len(self.place_numbers) + 1
        return n

    @staticmethod
    def _number(numbers: dict, blob: bytearray, c: int, name: str) -> int:
        n = numbers.get((c, name))
        if n is None:
            blob += c.to_bytes(2, "big") + _str(name)
            n = numbers[(c, name)] = len(numbers) + 1
        return n


_PLACE = struct.Struct(">HHH")  # country, city, postcode numbers
# Per IP: mark key position, place number, one 8-byte field per metric (1, 3, 5 or 7).
_IP_STRUCTS = {k: struct.Struct(">HH" + "Q" * k) for k in (1, 3, 5, 7)}
_LOW64 = (1 << 64) - 1


def _str(s: str) -> bytes:
    """A length-prefixed UTF-8 string as record.lua reads it."""
    b = s.encode("utf-8")
    return len(b).to_bytes(2, "big") + b


def _text(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))
