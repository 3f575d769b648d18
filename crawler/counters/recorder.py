"""Recording one visit's peers into the unique-IP counters (SPEC §4, §6).

Strategy: Python does the cheap, stateless part (normalise IPs, geolocate,
derive the §4 metrics, fingerprint every (metric, IP) pair, group the keys).
A read-only probe (``probe.lua``, one round trip) finds the IPs whose group
record is fresh: nothing of theirs can count, so a revisit of known peers
ends there. For the others, one Lua call (``record.lua``) per batch does the
whole check-mark-increment atomically for up to ``batch_pairs`` pairs:
marks for new pairs, the batch's total per (metric, index), and the StatHat
outbox increment. A batch never splits an IP's metrics. A visit's batches go
out in one pipeline: a visit of 200 new peers (~1,200 pairs, two batches)
costs one round trip after the probe, while each call holds Redis for a
bounded time (other clients' commands run between them). A crash between
batches leaves every finished batch counted and the rest not: a retry counts
exactly the rest (its pairs' marks are already there).

Shards (SPEC §9): with several, each distinct IP of a visit belongs to the
counter shard of its keyed fingerprint (``keys.shard_of_fingerprint``); its
marks, its counters' parts and its StatHat increments live there, so the
shards' parts add up exactly. A visit's IPs are split by shard and each
shard gets its own probe.lua and record.lua calls with that shard's keys
only (one slot per call); every shard's calls still go in one pipeline (the
probe round trip, then the record round trip). record.lua then also writes
the shard's rollup outbox, which ``rollup.Rollup`` adds to the totals that
``stats`` reads. With one shard none of this costs anything: shard 0 is the
home and the calls are exactly those of a single Redis.

The calls' arguments are built in ``calls`` (a place's part of them in
``places``); the locator's read errors are published by ``geo_errors``.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable

import redis

from crawler.counters.calls import ProbeCall, RecordBatch, ShardKeys, VisitPart
from crawler.counters.geo_errors import GeoErrorTally
from crawler.counters.marks import (
    DEFAULT_BUCKETS,
    Fingerprinter,
    load_secret,
    normalize_ip,
)
from crawler.counters.names import info_hash_hex, month_of
from crawler.counters.places import PlaceInfo
from crawler.counters.rollup import Rollup
from crawler.errors import StoreError
from crawler.keys import Keys, shard_of
from crawler.lua import Wait, register, run_pipelined

# ~1,400 pairs held Redis ~5 ms in one call; 800 keeps a call near 3 ms.
DEFAULT_BATCH_PAIRS = 800
# IPs one probe.lua call looks up (its MGET has at most as many keys).
PROBE_IPS = 2000
_FRESH = ord("0")
# Buckets one sweep call examines (~100 fields each): ~1-2 ms of Redis.
SWEEP_CALL_BUCKETS = 64


class Recorder:
    """Records visits' peers into the §4 counters.

    ``client``: a redis-py client; ``keys``: the namespace's home ``Keys``
    (its ``all_counter_shards`` are the counter shards; ``mark_buckets`` is the
    crawl's total, split evenly among them);
    ``settings``: uses ``secret``, ``redis_url`` and ``data_dir`` (the key,
    ``marks.load_secret``: may raise ``SettingsError``), ``dedupe_seconds``,
    ``stathat_ezkey`` and ``stathat_families``. ``locator``: a ``geo.Locator`` (default: one built
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
        self.window = math.ceil(settings.dedupe_seconds)
        try:
            secret = load_secret(client, keys, settings)
        except redis.RedisError as e:
            raise StoreError(f"cannot read the fingerprint secret: {e}") from e
        shards = keys.all_counter_shards
        # ``mark_buckets`` is the crawl's total: each shard holds its part of the marks
        self.fingerprints = Fingerprinter(secret, max(1, mark_buckets // len(shards)))
        posting = settings.stathat_ezkey is not None
        families = set(settings.stathat_families)
        self._post_countries = posting and "countries" in families
        self._post_torrents = posting and "torrents" in families
        self._post_processed = posting and "torrents.processed" in families
        self._shards = [ShardKeys(k, rollup=len(shards) > 1) for k in shards]
        self.rollup = Rollup(client, keys) if len(shards) > 1 else None
        self._record = register(client, "record", package=__package__)
        self._probe_script = register(client, "probe", package=__package__)
        self._sweep = register(client, "sweep", package=__package__)
        self._visited = register(client, "visited", package=__package__)
        self._places: dict = {}
        self._post = ("c" if self._post_countries else "-") + ("t" if self._post_torrents else "-")
        self._geo_errors = GeoErrorTally(client, keys, locator)
        # PEERCRAWL_WAIT_REPLICAS: each recording returns once that many replicas have it (docs/redis.md)
        self._wait = Wait.from_settings(settings)
        # Called between a visit's probe and its recording: a test interleaves
        # another writer there. None in production.
        self.after_probe: Callable[[], None] | None = None

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
        locate = self.locator.locate
        for ip in ips:
            packed = normalize_ip(ip)
            if packed is None or packed in seen:
                continue
            seen.add(packed)
            located.append((packed, locate(_text(packed))))
        self._geo_errors.publish(now)
        return self.record_places(info_hash, located, now)

    def record_places(self, info_hash: str, located: Iterable[tuple[bytes, object]], now: float) -> int:
        """``record_visit`` with IPs already packed and located: ``(packed_ip, Place)`` pairs.

        An IP given twice counts once (its first place is kept): two records of
        one IP in one record.lua call would each miss the other's new marks.
        Returns the ``new`` of §2, summed over the counter shards.
        """
        h = info_hash_hex(info_hash)
        t_fp = self.fingerprints.torrent(h)
        now_i = int(now)
        if not 0 <= now_i < 1 << 32:
            raise ValueError(f"time {now!r} does not fit a mark (unix seconds, 32 bits)")
        # 1. fingerprint every IP, split the IPs by shard and probe their group
        # records: a revisit whose peers are all known ends here, and Python
        # builds full records only for the others.
        parts = self._probe_calls(t_fp, located)
        if not parts:
            return 0
        flags = self._probe(h, now_i, parts)
        if self.after_probe is not None:
            self.after_probe()
        # 2. record the IPs that might count (record.lua checks again, atomically)
        month = month_of(now)
        batches = []
        for part, fl in zip(parts, flags):
            got = self._batches(part, fl, part.shard.fixed(h, month), month)
            if got[-1].pairs:
                batches += [(part.shard, b) for b in got]
        if not batches:
            return 0
        return self._run(h, now_i, batches)

    def probe(self, info_hash: str, located: Iterable[tuple[bytes, object]], now: float) -> str:
        """What the probe answers for ``located``, recording nothing: per distinct IP "1" if it
        might count, "0" if its group record is fresh (it cannot count)."""
        h = info_hash_hex(info_hash)
        parts = self._probe_calls(self.fingerprints.torrent(h), located, keep_order=True)
        if not parts:
            return ""
        out = {}
        for part, fl in zip(parts, self._probe(h, int(now), parts)):
            out.update(zip(part.order, fl.decode()))
        return "".join(out[i] for i in range(len(out)))

    def _probe_calls(self, t_fp: int, located: Iterable[tuple[bytes, object]],
                     keep_order: bool = False) -> list[VisitPart]:
        """Fingerprint each distinct IP of ``located`` into its shard's probe.lua calls of ``PROBE_IPS`` IPs.

        Returns the visit's parts (shards with at least one IP), each with its
        rows ``(place tuple, (PlaceInfo, metric lanes of this visit, its probe
        lane), IP fingerprint, bucket of (IP, torrent))`` in its calls' order.
        """
        fps = self.fingerprints
        ip_hash, n_buckets, from_bytes = fps.ip_hasher().copy, fps.buckets, int.from_bytes
        vplaces: dict = {}  # place tuple -> (info, metric lanes of this visit, its probe lane)
        nshards, shards = len(self._shards), self._shards
        parts: dict[int, VisitPart] = {}
        part = None
        distinct: set[bytes] = set()
        for packed, place in located:
            if packed in distinct:
                continue
            distinct.add(packed)
            pkey = (place.country, place.city, place.postcode)
            vp = vplaces.get(pkey)
            if vp is None:
                info = self._place_info(pkey)
                lanes = info.g ^ t_fp * info.tr
                vp = vplaces[pkey] = (info, lanes, lanes >> (info.shift - 64))
            d = ip_hash()
            d.update(packed)
            f = from_bytes(d.digest(), "big")
            s = (f >> 104) % nshards if nshards > 1 else 0  # keys.shard_of_fingerprint, inlined
            part = parts.get(s)
            if part is None:
                part = parts[s] = VisitPart(shards[s])
            probe = part.probe
            if probe.n == PROBE_IPS:
                probe = part.probe = ProbeCall()
                part.probes.append(probe)
            bucket = ((f >> 64) ^ t_fp) % n_buckets
            b = probe.bnumbers.get(bucket)
            if b is None:
                probe.buckets.append(part.shard.bucket(bucket))
                b = probe.bnumbers[bucket] = len(probe.buckets)
            probe.args += ((b << 64) | (vp[2] ^ (f & _LOW64))).to_bytes(10, "big")
            probe.n += 1
            part.rows.append((pkey, vp, f, bucket))
            if keep_order:
                part.order.append(len(distinct) - 1)
        return list(parts.values())

    def _batches(self, part: VisitPart, flags: bytes, fixed: list, month: str) -> list[RecordBatch]:
        """Build the record.lua calls of one shard's ``part`` for the rows whose probe flag is not fresh.

        Each call takes at most ``batch_pairs`` pairs (one IP's pairs are
        never split); the last call holds no pairs only if no IP might count.
        """
        shard, n_buckets, limit = part.shard, self.fingerprints.buckets, self.batch_pairs
        bkey, country_keys = shard.bucket, shard.country_keys
        batches = [RecordBatch(fixed, month)]
        batch = batches[0]
        for (pkey, (info, lanes, _), f, bucket), flag in zip(part.rows, flags):
            if flag == _FRESH:
                continue
            if batch.pairs and batch.pairs + info.k > limit:
                batch = RecordBatch(fixed, month)
                batches.append(batch)
            head = batch.heads.get(pkey)
            if head is None:
                head = batch.add_place(pkey, info, country_keys)
            # the torrent's marks of this IP (and its group): bucket by (IP, torrent)
            tb = batch.bnumbers.get(bucket)
            if tb is None:
                batch.buckets.append(bkey(bucket))
                tb = batch.bnumbers[bucket] = len(batch.buckets)
            gb = 0
            if info.k > 1:
                # its place marks: bucket by IP alone
                bucket = (f >> 64) % n_buckets
                gb = batch.bnumbers.get(bucket)
                if gb is None:
                    batch.buckets.append(bkey(bucket))
                    gb = batch.bnumbers[bucket] = len(batch.buckets)
            batch.ips += ((tb << info.tshift) | (gb << info.gshift) | head
                          | (lanes ^ (f & _LOW64) * info.r)).to_bytes(info.nbytes, "big")
            batch.pairs += info.k
        return batches

    def _probe(self, h: str, now: int, parts: list[VisitPart]) -> list[bytes]:
        """Run ``probe.lua`` over every part's calls in one round trip: per part one flag byte per IP."""
        cutoff = now - self.window
        try:
            calls = [(self._probe_script, [part.shard.torrents, *p.buckets], [cutoff, h, bytes(p.args)])
                     for part in parts for p in part.probes]
            if len(calls) == 1:
                script, keys, args = calls[0]
                return [script(keys=keys, args=args)]
            replies = iter(run_pipelined(self.client, calls))
            return [b"".join(next(replies) for _ in part.probes) for part in parts]
        except redis.RedisError as e:
            raise StoreError(f"recording peers failed: {e}") from e

    def _place_info(self, pkey: tuple) -> PlaceInfo:
        """Escaped names and metric fingerprints of a place (cached per process)."""
        info = self._places.get(pkey)
        if info is None:
            if len(self._places) > 100_000:  # bounded: the world has ~100k cities
                self._places.clear()
            info = self._places[pkey] = PlaceInfo(pkey, self.fingerprints)
        return info

    def _run(self, h: str, now: int, batches: list[tuple[ShardKeys, RecordBatch]]) -> int:
        """Run ``record.lua`` once per batch (each in its shard), all in one round trip.

        Returns the sum of their counts of torrents.<h>.users.
        """
        calls = []
        for shard, b in batches:
            keys = b.keys + b.buckets
            if len(keys) > 65535:  # pragma: no cover - batch_pairs keeps it far below
                raise ValueError("batch too large")
            args = [now, now - self.window, h, self._post, bytes(b.countries), bytes(b.places), len(b.keys),
                    bytes(b.ips)]
            if shard.tail:
                args.append(shard.tail)
            calls.append((keys, args))
        try:
            if len(calls) == 1 and self._wait is None:
                keys, args = calls[0]
                return int(self._record(keys=keys, args=args))
            return sum(int(r) for r in run_pipelined(self.client, [(self._record, k, a) for k, a in calls],
                                                      wait=self._wait))
        except redis.RedisError as e:
            raise StoreError(f"recording peers failed: {e}") from e

    # --- torrents.processed ----------------------------------------------
    def visited(self, info_hash: str, now: float) -> bool:
        """Note one visit of ``info_hash`` for ``torrents.processed`` (StatHat).

        Counts each torrent at most once per UTC clock hour, in the counter
        shard of its info-hash (``keys.shard_of``). Returns True when this visit
        added 1 to that shard's outbox; always False when StatHat is off.
        """
        if not self._post_processed:
            return False
        h = info_hash_hex(info_hash)
        shard = self.keys.counter_shard(shard_of(h, self.keys.counter_shards))
        hour = int(now) // 3600
        try:
            keys, args = [shard.processed(hour), shard.outbox], [h, 2 * 3600]
            if self._wait is None:
                return bool(self._visited(keys=keys, args=args))
            return bool(run_pipelined(self.client, [(self._visited, keys, args)], wait=self._wait)[0])
        except redis.RedisError as e:
            raise StoreError(f"recording a visit failed: {e}") from e

    # --- memory -----------------------------------------------------------
    def sweep(self, budget: int = 1024, now: float | None = None) -> int:
        """Remove expired marks from the next ``budget`` buckets; returns fields removed.

        Workers share one cursor (INCRBY on the home's ``mk:sweep``) over the
        buckets of every shard, shard by shard, so concurrent sweepers take
        different buckets and each sweep.lua call reads one shard's; a full
        pass over 2**18 buckets at 1,024 per flush cycle of 10 s takes ~45
        minutes, well inside the 30-day window. With several shards it then
        adds the shards' rollup outboxes to the totals (``rollup.Rollup``), so
        they stay short between reads. ``now`` defaults to the Redis server's
        clock.
        """
        per = self.fingerprints.buckets
        n = per * len(self._shards)
        budget = max(1, min(budget, n))
        try:
            if now is None:
                now = self.client.time()[0]
            start = self.client.incrby(self.keys.sweep_cursor, budget) - budget
            cutoff = int(now) - self.window
            removed = 0
            chunk, at = [], None
            for i in range(budget):
                g = (start + i) % n
                s, b = divmod(g, per)
                if chunk and (s != at or len(chunk) == SWEEP_CALL_BUCKETS):
                    removed += self._sweep(keys=chunk, args=[cutoff])
                    chunk = []
                at = s
                chunk.append(self._shards[s].bucket(b))
            removed += self._sweep(keys=chunk, args=[cutoff])
        except redis.RedisError as e:
            raise StoreError(f"sweeping dedupe marks failed: {e}") from e
        if self.rollup is not None:
            self.rollup.settle(everything=False)
        return removed


_LOW64 = (1 << 64) - 1


def _text(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))
