"""Every Redis key name peercrawl uses, in one place (docs/redis.md).

A namespace's keys live in shards (crawler/shard_layout.py): the home holds
what the whole crawl shares (workers, trackers' health, the layout), a
torrent's queue keys live in the shard of its info-hash (``Keys.for_torrent``),
an IP's marks and counter parts in the shard of its fingerprint. Every Lua
script touches one shard's keys, all through KEYS, so each runs in one slot.
Info-hashes appear as 40 lower-case hex characters.

Each key is one named property or method below whose docstring gives its
type and content; docs/redis.md describes them all. No other module builds a
key name (tests/test_keys.py greps crawler/, workers/ and geo/ for it): a new
key gets a method here.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from crawler.shard_layout import ShardLayout


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


# The namespace-wide budgets kept as the announce cap is: their keys' first part.
BUDGETS = {"dht": "dhtcap", "metadata": "mdcap"}


@dataclass(frozen=True)
class Keys(ShardLayout):
    """The key names of one namespace (``PEERCRAWL_NAMESPACE``) and its layout.

    ``Keys(namespace, shards)`` is the home; ``shard(i)`` (and
    ``for_torrent``, ``all_shards``) the keys of one shard, whose ``tag`` is
    not empty unless the crawl has a single shard. A home-only key asked of
    a shard raises ``ValueError``: it would name a key nobody reads.
    """

    @property
    def prefix(self) -> str:
        """``{<namespace>}`` (the home, and the one shard of a one-shard crawl) or ``{<tag>}``."""
        return "{" + (self.tag or self.namespace) + "}"

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix,) + parts)

    def _home(self, *parts: str) -> str:
        if self.tag:
            raise ValueError(f"{parts[0]!r} is a key of the namespace's home, not of shard {self.tag!r}")
        return self._k(*parts)

    # --- the layout (contract §9) -------------------------------------------------
    def for_torrent(self, info_hash: str) -> Keys:
        """The keys of the shard holding ``info_hash``'s queue state (``shard_of``)."""
        return self.shard(shard_of(info_hash, self.shards))

    @property
    def layout(self) -> str:
        """STRING JSON ``{"shards": n, "counters": m}``: the crawl's layout, written by the first
        process that opens a namespace (``crawler/store/layout.py``); ``reshard`` changes ``shards`` and
        says ``"moving_to"`` while it runs."""
        return self._home("layout")

    # --- the queue (contract §1) ---------------------------------------------
    @property
    def ready(self) -> str:
        """ZSET info-hash -> score: ready torrents, highest first."""
        return self._k("ready")

    def ready_in(self, lane: str) -> str:
        """ZSET info-hash -> score: the ready torrents of ``lane`` (crawler/queue/lanes.py); the normal
        lane's is ``ready``."""
        return self.ready if lane == "normal" else self._k("ready", lane)

    def lane_members(self, lane: str) -> str:
        """ZSET info-hash -> its due time while it cools, else 0 (claim.lua's due index of the lane):
        the torrents of ``lane`` (high, low or discovered; a torrent in none is in the normal lane)."""
        if lane == "normal":
            raise ValueError("the normal lane has no member set: it is every torrent of no other lane")
        return self._k("lane", lane)

    @property
    def lane_credit(self) -> str:
        """HASH lane -> the claims owed to it from its guaranteed share (claim.lua)."""
        return self._k("lanecredit")

    @property
    def since(self) -> str:
        """ZSET info-hash -> unix time it became ready (queue latency)."""
        return self._k("since")

    @property
    def cooling(self) -> str:
        """ZSET info-hash -> unix time it becomes ready again."""
        return self._k("cooling")

    @property
    def leases(self) -> str:
        """ZSET info-hash -> unix time its lease expires (in flight)."""
        return self._k("leases")

    @property
    def evicted(self) -> str:
        """ZSET info-hash -> unix time of eviction (tombstones)."""
        return self._k("evicted")

    @property
    def tombstones(self) -> str:
        """HASH info-hash -> JSON {reason, at, score} of evicted torrents."""
        return self._k("tombstones")

    @property
    def held(self) -> str:
        """HASH info-hash -> score of torrents cooling, in flight or quarantined (no field: 1.0)."""
        return self._k("held")

    @property
    def claims(self) -> str:
        """HASH info-hash -> times claimed; the latest is the lease token."""
        return self._k("claims")

    @property
    def expiries(self) -> str:
        """HASH info-hash -> leases expired in a row without a completion."""
        return self._k("expiries")

    @property
    def quarantined(self) -> str:
        """ZSET info-hash -> unix time it was quarantined (poison torrents)."""
        return self._k("quarantined")

    @property
    def quarantine(self) -> str:
        """HASH info-hash -> JSON {reason, at, expiries, score} of quarantined torrents."""
        return self._k("quarantine")

    def torrent(self, info_hash: str) -> str:
        """HASH of one torrent: score, claims, visits, seeders, tombstone..."""
        return self._k("t", info_hash)

    def trackers(self, info_hash: str) -> str:
        """SET of the torrent's own tracker URLs (magnet tr=, announce-list)."""
        return self._k("tr", info_hash)

    def history(self, info_hash: str) -> str:
        """STRING of the torrent's last visits, 20 bytes each (``complete.lua``, ``torrent_fields.history``)."""
        return self._k("vh", info_hash)

    @property
    def visits(self) -> str:
        """HASH unix minute -> visits completed in that minute."""
        return self._k("visits")

    @property
    def failed_visits(self) -> str:
        """HASH unix minute -> failed visits (no source answered)."""
        return self._k("failedvisits")

    # --- workers ---------------------------------------------------------
    @property
    def atrisk(self) -> str:
        """ZSET info-hash -> unix time from which its next visit without peers evicts it: the torrents
        one such visit would bring below the eviction threshold (complete.lua; pinned ones are not)."""
        return self._k("atrisk")

    @property
    def rates(self) -> str:
        """HASH of the queue's per-minute operator counts (crawler/queue/rates.py): ``a:<minute>``
        torrents asked for, ``s:<minute>`` handed out, ``r:<minute>`` leases reclaimed,
        ``rt:<minute>:<bucket>`` visit round trips."""
        return self._k("rates")

    @property
    def workers(self) -> str:
        """ZSET worker id -> heartbeat expiry time."""
        return self._home("workers")

    def worker(self, worker_id: str) -> str:
        """HASH of one worker process (host, pid, concurrency, visits...)."""
        return self._home("w", worker_id)

    # --- trackers' health (contract §3) --------------------------------------
    @property
    def tracker_health(self) -> str:
        """HASH tracker URL -> JSON {answers, failures, refusals, last_refusal, streak, until, cut, cap,
        no_scrape_until, used}."""
        return self._home("trackerhealth")

    @property
    def tracker_used(self) -> str:
        """ZSET tracker URL -> unix time it was last used or last found named by a torrent (prunes tracker_health)."""
        return self._home("trackerused")

    @property
    def tracker_rank(self) -> str:
        """ZSET tracker URL -> answers + failures + refusals: the busiest trackers first (tracker_health.lua)."""
        return self._home("trackerrank")

    @property
    def tracker_totals(self) -> str:
        """HASH answers, failures, refusals, cut -> their sums over tracker health's ranked entries;
        walked -> unix time the last prune walk began (tracker_walk.lua)."""
        return self._home("trackertotals")

    # --- the announce cap (contract §3) ------------------------------------
    @property
    def announce_cap(self) -> str:
        """HASH: ``*`` (the namespace's cap) or a tracker URL -> the next free request time,
        whole microseconds of Redis's clock (crawler/sources/rate_budget.lua)."""
        return self._home("cap")

    def announce_cap_minute(self, minute: int) -> str:
        """HASH of one UTC minute (unix time // 60) of the cap, expiring after ten minutes:
        ``sent`` requests granted, ``held`` of them held back by the namespace's cap,
        ``wait_us`` their waits summed, ``refused`` visits told to ask again later, and
        ``sent:<url>``, ``held:<url>`` per capped tracker."""
        return self._home("capm", str(minute))

    def budget(self, name: str) -> str:
        """HASH ``*`` -> the next free time, as ``announce_cap``, of the DHT's lookups (``dht``) or the
        metadata fetches (``metadata``): their namespace-wide budgets."""
        return self._home(BUDGETS[name])

    def budget_minute(self, name: str, minute: int) -> str:
        """HASH of one minute of ``budget(name)``, as ``announce_cap_minute``."""
        return self._home(BUDGETS[name] + "m", str(minute))

    def request_minute(self, minute: int) -> str:
        """HASH of one UTC minute (unix time // 60) of requests sent to the sources, expiring after two hours
        (crawler/sources/request_counts.py): per kind, per busy tracker and kind, the others' summed."""
        return self._home("reqm", str(minute))

    # --- discovery (contract §3) ------------------------------------------
    def discovery_minute(self, minute: int) -> str:
        """HASH of one UTC minute (unix time // 60) of discovery, expiring after ten minutes:
        ``sampled`` hashes in BEP 51 answers, ``new`` of them not seen by that worker lately,
        ``admitted`` of those added to the discovered lane, ``queries`` sample queries sent."""
        return self._home("disc", str(minute))

    def tracker_min_interval(self, info_hash: str) -> str:
        """HASH tracker URL -> unix time before which it must not be re-announced."""
        return self._k("mi", info_hash)

    # --- counters, dedupe marks and StatHat (contract §4, §6) -----------------
    def mark_bucket(self, n: int) -> str:
        """STRING: dedupe mark bucket ``n`` (``mk:<n>``), 12-byte records of
        (8-byte keyed fingerprint, big-endian u32 unix second); see counters/marks.py."""
        return self._k("mk", str(n))

    @property
    def mark_buckets_match(self) -> str:
        """SCAN MATCH pattern of every mark bucket (``mk:[0-9]*``; not the sweep cursor)."""
        return self._k("mk", "[0-9]*")

    @property
    def sweep_cursor(self) -> str:
        """STRING integer: the bucket number the next sweep of stale marks starts at
        (INCRBY, shared by every worker; taken modulo the bucket count)."""
        return self._k("mk", "sweep")

    def index(self, period: str, scope: tuple[str, ...]) -> str:
        """One counter index ``ix:<period>:<scope...>`` (counters/names.py).

        ``period`` is ``all`` (lifetime) or ``YYYY-MM``; ``scope`` the family and
        its narrowing, e.g. ``("cities", "c", "Germany")``. A ZSET member -> count,
        except one torrent's indexes (``(family, "t", <info-hash>)``): a HASH
        member -> count.
        """
        return self._k("ix", period, *scope)

    def total(self, period: str, scope: tuple[str, ...]) -> str:
        """One index of counter totals ``tx:<period>:<scope...>`` (crawls of more than one shard).

        The same shape and members as the place ``index`` of ``scope``, holding the sum
        over every shard's part, in the shard ``total_shard`` names; kept by
        ``counters/rollup.py``, read by ``stats`` and ``export``.
        """
        return self._k("tx", period, *scope)

    @property
    def rollup_outbox(self) -> str:
        """HASH place counter -> count not yet in the totals (``rx:outbox``; more than one shard),
        written by places.lua with the shard's marks; a field is ``rollup.outbox_field``."""
        return self._k("rx", "outbox")

    @property
    def rollup_in_flight(self) -> str:
        """HASH: the rollup batch being added to the totals (``rx:inflight``; same fields as ``rollup_outbox``)."""
        return self._k("rx", "inflight")

    @property
    def rollup_seq(self) -> str:
        """STRING integer: the number of this shard's latest rollup batch (``rx:seq``; the one in
        flight while ``rollup_in_flight`` exists)."""
        return self._k("rx", "seq")

    @property
    def rollup_taken(self) -> str:
        """STRING: Redis ms when the rollup batch in flight was taken (``rx:taken``); the
        workers' settle leaves a younger batch to the reader adding it."""
        return self._k("rx", "taken")

    @property
    def rollup_applied(self) -> str:
        """HASH source shard -> ``batch * 65536 + chunk``: the last chunk of each shard's rollup
        batches added to this shard's totals (``rx:applied``), so a retried chunk adds nothing."""
        return self._k("rx", "applied")

    @property
    def outbox(self) -> str:
        """HASH StatHat stat name -> pending count (``sh:outbox``), written with the counters."""
        return self._k("sh", "outbox")

    @property
    def outbox_in_flight(self) -> str:
        """HASH StatHat stat name -> count of the batch a flusher is posting (``sh:inflight``)."""
        return self._k("sh", "inflight")

    @property
    def outbox_owner(self) -> str:
        """STRING ``"<token> <lease end, Redis ms>"``: the flusher holding the claim on
        ``outbox_in_flight`` (``sh:owner``; no TTL, renewed by each ack)."""
        return self._k("sh", "owner")

    def processed(self, hour: int) -> str:
        """HASH info-hash -> 1: torrents counted in ``torrents.processed`` in unix hour
        ``hour`` (``sh:processed:<hour>``; visited.lua: expires two hours after its last new member)."""
        return self._k("sh", "processed", str(int(hour)))

    @property
    def geo_errors(self) -> str:
        """HASH errors (lookups that failed on a damaged GeoIP database, in total),
        last (the last error, no address), at (its unix time)."""
        return self._home("geoerrors")

    @property
    def announce_port(self) -> str:
        """STRING: the port every worker announces on when PEERCRAWL_ANNOUNCE_PORT is 0."""
        return self._home("announceport")

    @property
    def secret(self) -> str:
        """STRING: a fingerprint key found in Redis; never written, read only to refuse to record while it is
        there and to move it out (``peercrawl secret --move``): the key never lives in Redis (contract §4)."""
        return self._home("secret")

    # --- not peercrawl's ---------------------------------------------------
    @property
    def match_all(self) -> str:
        """SCAN MATCH pattern of every key of the namespace, home and shards (``{<namespace>[}/]*``)."""
        return "{" + self.namespace + "[}/]*"

    def scratch(self, *parts: str) -> str:
        """Any type: a key a benchmark or test keeps under the namespace (dropped with it); peercrawl never
        reads or writes one (a test forbids it in crawler/, workers/ and geo/); a first part that names one
        of peercrawl's own keys is refused."""
        if not parts or parts[0] in RESERVED:
            raise ValueError(f"scratch key {parts!r} would collide with one of peercrawl's keys")
        return self._k(*parts)


# The first part (after the namespace) of every key built above.
RESERVED = frozenset({
    "ready", "since", "cooling", "leases", "evicted", "tombstones", "held", "claims", "expiries",
    "quarantined", "quarantine", "t", "tr", "vh", "visits", "failedvisits", "workers", "w", "trackerhealth",
    "trackerused", "trackerrank", "trackertotals", "mi", "mk", "ix", "tx", "rx", "sh", "geoerrors", "announceport", "secret", "layout",
    "cap", "capm", "rates", "atrisk", "lane", "lanecredit", "disc", "reqm", "dhtcap", "dhtcapm", "mdcap", "mdcapm",
})
