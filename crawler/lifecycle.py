"""The torrent lifecycle of SPEC §1: the one module that changes a torrent's state.

Strategy. Each state is a sorted set under the namespace: ``ready`` (by
score), ``cooling`` (by due time), ``leases`` (in flight, by lease deadline),
``evicted`` (by eviction time) and ``quarantined`` (by quarantine time). A
torrent is a member of exactly one of them; every transition is one Lua
script (``crawler/lua/*.lua``) that removes it from one set and adds it to
the next, so no crash between two commands can lose or duplicate a torrent.
While a torrent is out of ``ready`` its score waits in the ``held`` hash; no
held score means 1.0.

Every script checks its arguments and reads everything it needs before its
first write, and slices every multi-value command into ~1,000 values (Lua
unpacks onto a stack of ~8,000): Redis keeps a failed script's earlier
writes, so a script that could fail halfway could lose torrents. The Python
side also clamps what it sends (``MAX_CLAIM``, ``ADD_BATCH``, trackers per
item), so one call stays short whatever a setting or flag says.

A new torrent is admitted into ``cooling`` due at once, with no held score:
it counts as ready from that instant, and admission costs one ZADD per batch.
The next claims move it into ``ready`` (where scores are compared).

A claim's token is the torrent's claim count after the claim. Extend,
complete, fail and release check it, so a worker whose lease expired (and
whose torrent another worker has since claimed) changes nothing.

Housekeeping (expired leases back to ready, due cooling torrents to ready,
old tombstones forgotten) runs inside every claim, bounded per call: a queue
needs no separate janitor process, and a dead worker's torrents come back as
soon as anyone claims.

Poison torrents. Each expired lease raises the torrent's streak in the
``expiries`` hash; a completion or a deferral (failed visit or nothing to
ask) ends it, since the worker came back. At the K-th expiry in a row
(``PEERCRAWL_QUARANTINE_AFTER``) housekeeping moves the torrent to
``quarantined`` instead of ready: a visit that kills or outlives its worker
every time would otherwise be retried forever. Its held score stays, the
``quarantine`` hash keeps the reason (and the torrent hash its last visit
error), and ``add --readmit`` puts it back, due at once with its score.
Quarantined torrents count as tracked.

Trackers per torrent are bounded (``PEERCRAWL_MAX_TRACKERS_PER_TORRENT``):
``add.lua`` never grows a torrent's tracker set past the bound (what it
drops is reported), and ``plan.lua`` hands a visit at most that many, so a
set stored before the bound is never announced whole.

::

    add ──► cooling (due now) ──due──► ready ──claim──► in flight
               ▲                         ▲                  │  │  │
               │                         └──lease expired───┘  │  │
               └───────complete (new score) / fail (kept)──────┘  │
                                         evicted ◄──complete──────┘
       quarantined ◄── K-th lease expired in a row ── in flight
       add --readmit: evicted or quarantined ──► cooling (due now)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import redis

from crawler import lua
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.scoring import Outcome, multiplier
from crawler.settings import Settings

# Housekeeping moves at most this many expired leases, due torrents and old
# tombstones each per call. A claim of n moves 2n + 8: more than it takes,
# so a backlog of due torrents drains as fast as workers claim, while each
# claim stays a few tens of microseconds of Redis time however large the
# backlog (a fixed 200 per claim made every claim of one cost ~1 ms while a
# million new torrents waited).
HOUSEKEEPING_BUDGET = 200
# Most torrents one claim call may lease. claim.lua slices any size; this
# bounds one call's Redis time (a claim of 2,000 also moves up to 4,008 due
# torrents: tens of ms), and a pool larger than this claims again at once.
MAX_CLAIM = 2000

# Items per add.lua call and calls per pipeline round trip (the scripts slice
# any size; these keep one call's Redis time short).
ADD_BATCH = 1000
ADD_PIPELINE = 4


@dataclass(frozen=True)
class Lease:
    """A claimed torrent: its info-hash, score at claim, and lease token."""

    info_hash: str
    score: float
    token: int


class NewItem(NamedTuple):
    """One torrent to add: a 40-hex info-hash and its own trackers.

    A named tuple rather than a dataclass: bulk intake makes millions.
    """

    info_hash: str
    trackers: tuple[str, ...] = ()


ADD_STATUS = {"a": "added", "t": "already_tracked", "e": "skipped_evicted", "r": "added",
              "Q": "skipped_quarantined", "q": "readmitted"}


# Per-minute visit counts older than this are dropped (status reads the last hour).
VISIT_BUCKETS_KEPT = 2 * 86400


def _minute(now: float) -> str:
    return str(int(now // 60) * 60)


class Queue:
    """The score queue in Redis. Every method is one atomic step.

    ``client``: a redis-py client (bytes responses); ``keys``: the namespace's
    key names; ``settings``: lease, revisit, retry and scoring settings.
    Redis errors are raised as ``StoreError``.
    """

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings):
        self.client = client
        self.keys = keys
        self.settings = settings
        self._add = lua.register(client, "add")
        self._claim = lua.register(client, "claim")
        self._extend = lua.register(client, "extend")
        self._complete = lua.register(client, "complete")
        self._release = lua.register(client, "release")
        self._defer = lua.register(client, "defer")
        self._plan = lua.register(client, "plan")

    # --- intake ------------------------------------------------------------
    def _add_args(self, items: Sequence[NewItem], readmit: bool, now: float) -> tuple[list, list, list[int]]:
        """KEYS and ARGV of one add.lua call, and per item the trackers cut here.

        An item's trackers beyond the per-torrent bound are not sent (the
        script could not store them anyway), so one hostile magnet cannot
        make a call huge.
        """
        k = self.keys
        cap = self.settings.max_trackers_per_torrent
        keys = [k.ready, k.cooling, k.leases, k.evicted, k.tombstones, k.quarantined, k.quarantine, k.expiries]
        args: list = [repr(now), "1" if readmit else "0", cap]
        cut: list[int] = []
        for item in items:
            if item.trackers or readmit:  # only these items' own keys are touched
                keys.append(k.torrent(item.info_hash))
                keys.append(k.trackers(item.info_hash))
            trackers, n = item.trackers, 0
            if len(trackers) > cap:
                unique = tuple(dict.fromkeys(trackers))
                trackers, n = unique[:cap], max(0, len(unique) - cap)
            cut.append(n)
            args.append(item.info_hash)
            args.append(str(len(trackers)))
            args.extend(trackers)
        return keys, args, cut

    @staticmethod
    def _added(batch: Sequence[NewItem], reply: list, cut: list[int],
               on_dropped: Callable[[NewItem, int], None] | None) -> list[str]:
        """Statuses of one add.lua reply; ``on_dropped(item, n)`` for trackers not stored."""
        letters, dropped = reply[0].decode(), reply[1]
        if on_dropped is not None:
            for i in range(0, len(dropped), 2):
                cut[int(dropped[i]) - 1] += int(dropped[i + 1])
            for item, n in zip(batch, cut):
                if n:
                    on_dropped(item, n)
        return [ADD_STATUS[c] for c in letters]

    def add(self, items: Sequence[NewItem], readmit: bool = False, now: float | None = None,
            on_dropped: Callable[[NewItem, int], None] | None = None) -> list[str]:
        """Admit ``items``; one status per item (``ADD_STATUS``'s values).

        Any number of items: they go in script calls of ``ADD_BATCH``.
        ``on_dropped(item, n)``: called for each item of which ``n`` trackers
        were not stored (its torrent's set was at the per-torrent bound).
        """
        now = time.time() if now is None else now
        out: list[str] = []
        for i in range(0, len(items), ADD_BATCH):
            batch = items[i:i + ADD_BATCH]
            keys, args, cut = self._add_args(batch, readmit, now)
            try:
                reply = self._add(keys=keys, args=args)
            except redis.RedisError as e:
                raise StoreError(f"adding torrents failed: {e}") from e
            out += self._added(batch, reply, cut, on_dropped)
        return out

    def add_stream(
        self, items: Iterable[NewItem], readmit: bool = False, batch: int = ADD_BATCH, pipeline: int = ADD_PIPELINE,
        on_dropped: Callable[[NewItem, int], None] | None = None,
    ) -> Iterator[tuple[NewItem, str]]:
        """Admit a long stream of items in pipelined batches, yielding (item, status).

        Each batch is one atomic script call of at most ``ADD_BATCH`` items;
        ``pipeline`` calls share a round trip. Duplicates inside one batch
        are reported as already_tracked. ``on_dropped`` as in ``add``.
        """
        batch = max(1, min(batch, ADD_BATCH))
        pipeline = max(1, pipeline)
        pending: list[list[NewItem]] = []
        current: list[NewItem] = []
        for item in items:
            current.append(item)
            if len(current) >= batch:
                pending.append(current)
                current = []
                if len(pending) >= pipeline:
                    yield from self._flush(pending, readmit, on_dropped)
                    pending = []
        if current:
            pending.append(current)
        if pending:
            yield from self._flush(pending, readmit, on_dropped)

    def _flush(self, batches: list[list[NewItem]], readmit: bool,
               on_dropped: Callable[[NewItem, int], None] | None) -> Iterator[tuple[NewItem, str]]:
        now = time.time()
        calls, cuts = [], []
        for b in batches:
            keys, args, cut = self._add_args(b, readmit, now)
            calls.append((self._add, keys, args))
            cuts.append(cut)
        try:
            results = lua.run_pipelined(self.client, calls)
        except redis.RedisError as e:
            raise StoreError(f"adding torrents failed: {e}") from e
        for b, reply, cut in zip(batches, results, cuts):
            yield from zip(b, self._added(b, reply, cut, on_dropped))

    # --- work ----------------------------------------------------------------
    def _claim_args(self, count: int, now: float) -> dict:
        k = self.keys
        return dict(
            keys=[k.ready, k.since, k.cooling, k.leases, k.evicted, k.tombstones, k.held, k.claims,
                  k.expiries, k.quarantined, k.quarantine],
            args=[
                repr(now),
                repr(now + self.settings.lease_seconds),
                count,
                2 * count + 8 if count else HOUSEKEEPING_BUDGET,
                repr(now - self.settings.tombstone_seconds),
                self.settings.quarantine_after,
            ],
        )

    @staticmethod
    def _leases(flat: list) -> list[Lease]:
        return [Lease(flat[i].decode(), float(flat[i + 1]), int(flat[i + 2])) for i in range(0, len(flat), 3)]

    def claim(self, count: int = 1, now: float | None = None) -> list[Lease]:
        """Lease up to ``count`` (at most ``MAX_CLAIM``) of the highest-scored ready torrents."""
        now = time.time() if now is None else now
        count = max(0, min(count, MAX_CLAIM))
        try:
            flat = self._claim(**self._claim_args(count, now))
        except redis.RedisError as e:
            raise StoreError(f"claiming torrents failed: {e}") from e
        return self._leases(flat)

    def housekeep(self, now: float | None = None) -> None:
        """Run the claim's housekeeping without claiming anything."""
        self.claim(0, now)

    def extend(self, lease: Lease, now: float | None = None) -> bool:
        """Push the lease deadline to now + lease time; False if the lease was lost."""
        now = time.time() if now is None else now
        try:
            return bool(
                self._extend(
                    keys=[self.keys.leases, self.keys.claims],
                    args=[lease.info_hash, lease.token, repr(now + self.settings.lease_seconds)],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"extending a lease failed: {e}") from e

    def _complete_args(self, lease: Lease, result: Outcome, peers: int, seeders: int | None,
                       leechers: int | None, due: float | None, now: float) -> dict:
        due = now + self.settings.revisit_seconds if due is None else due
        k = self.keys
        h = lease.info_hash
        return dict(
            keys=[k.leases, k.held, k.claims, k.cooling, k.evicted, k.tombstones, k.torrent(h), k.trackers(h),
                  k.visits, k.expiries],
            args=[
                h,
                lease.token,
                repr(multiplier(result, self.settings)),
                repr(self.settings.evict_below),
                repr(now),
                repr(due),
                int(math.ceil(self.settings.tombstone_seconds)),
                "" if seeders is None else seeders,
                "" if leechers is None else leechers,
                peers,
                _minute(now),
                result.value,
            ],
        )

    @staticmethod
    def _completed(reply: list) -> tuple[str, float | None]:
        return reply[0].decode(), (float(reply[1]) if len(reply) > 1 else None)

    def complete(
        self,
        lease: Lease,
        result: Outcome,
        *,
        peers: int = 0,
        seeders: int | None = None,
        leechers: int | None = None,
        due: float | None = None,
        now: float | None = None,
    ) -> tuple[str, float | None]:
        """Apply a scored visit: ("cooling"|"evicted", new score) or ("stale", None).

        ``due``: when the torrent may be visited again (default now + revisit).
        """
        now = time.time() if now is None else now
        try:
            reply = self._complete(**self._complete_args(lease, result, peers, seeders, leechers, due, now))
        except redis.RedisError as e:
            raise StoreError(f"completing a visit failed: {e}") from e
        return self._completed(reply)

    def complete_and_claim(
        self,
        lease: Lease,
        result: Outcome,
        count: int = 1,
        *,
        peers: int = 0,
        seeders: int | None = None,
        leechers: int | None = None,
        due: float | None = None,
        now: float | None = None,
    ) -> tuple[tuple[str, float | None], list[Lease]]:
        """``complete`` then ``claim(count)`` in one round trip (two atomic steps).

        For a claimer that goes straight on to the next torrent.
        """
        now = time.time() if now is None else now
        count = max(0, min(count, MAX_CLAIM))
        try:
            done, flat = self._pipelined([(self._complete, self._complete_args(lease, result, peers, seeders,
                                                                              leechers, due, now)),
                                          (self._claim, self._claim_args(count, now))])
        except redis.RedisError as e:
            raise StoreError(f"completing a visit and claiming failed: {e}") from e
        return self._completed(done), self._leases(flat)

    def _pipelined(self, calls: list) -> list:
        """Run ``(script, {"keys", "args"})`` calls in one round trip (``lua.run_pipelined``)."""
        return lua.run_pipelined(self.client, [(script, a["keys"], a["args"]) for script, a in calls])

    def fail(self, lease: Lease, error: str = "", now: float | None = None, due: float | None = None) -> bool:
        """A visit no source answered: score kept, retry after the retry delay."""
        now = time.time() if now is None else now
        due = now + self.settings.retry_seconds if due is None else due
        k = self.keys
        try:
            return bool(
                self._defer(
                    keys=[k.leases, k.claims, k.cooling, k.expiries, k.torrent(lease.info_hash), k.failed_visits],
                    args=[lease.info_hash, lease.token, repr(due), repr(now), _minute(now), error[:200]],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"recording a failed visit failed: {e}") from e

    def defer(self, lease: Lease, due: float) -> bool:
        """Back to cooling until ``due`` unvisited: score kept, no visit or failure counted.

        False if the lease was not this holder's any more (nothing changed).
        """
        k = self.keys
        try:
            return bool(self._defer(keys=[k.leases, k.claims, k.cooling, k.expiries],
                                    args=[lease.info_hash, lease.token, repr(due)]))
        except redis.RedisError as e:
            raise StoreError(f"deferring a torrent failed: {e}") from e

    def note_error(self, info_hash: str, error: str, now: float | None = None) -> None:
        """Keep ``error`` as the torrent's last error, its state untouched.

        For a visit that crashed in its worker: the lease is left to expire
        (and counts towards quarantine), and ``torrent`` shows why. One HSET of
        two informational fields, so no script is needed. Raises ``StoreError``.
        """
        now = time.time() if now is None else now
        try:
            self.client.hset(self.keys.torrent(info_hash), mapping={"last_failure": repr(now),
                                                                     "last_error": error[:200]})
        except redis.RedisError as e:
            raise StoreError(f"recording a visit error failed: {e}") from e

    def release(self, lease: Lease, now: float | None = None) -> bool:
        """Hand a claimed torrent back to ready unvisited (shutdown)."""
        now = time.time() if now is None else now
        k = self.keys
        try:
            return bool(
                self._release(
                    keys=[k.leases, k.held, k.claims, k.ready, k.since],
                    args=[lease.info_hash, lease.token, repr(now)],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"handing back a torrent failed: {e}") from e

    # --- reading -------------------------------------------------------------
    def counts(self, now: float | None = None) -> dict:
        """State counts as users see them (SPEC §7 status).

        A cooling torrent past its due time, or a lease past its deadline,
        counts as ready: the next claim moves it there.
        """
        now = time.time() if now is None else now
        k = self.keys
        p = self.client.pipeline(transaction=True)
        p.zcard(k.ready)
        p.zcount(k.cooling, "-inf", now)
        p.zcard(k.cooling)
        p.zcount(k.leases, "-inf", now)
        p.zcard(k.leases)
        p.zcard(k.evicted)
        p.zrange(k.since, 0, 0, withscores=True)
        p.zrange(k.cooling, 0, 0, withscores=True)
        p.zrange(k.leases, 0, 0, withscores=True)
        p.zcard(k.quarantined)
        try:
            ready, cool_due, cooling, lease_due, leases, evicted, since0, cool0, lease0, quarantined = p.execute()
        except redis.RedisError as e:
            raise StoreError(f"reading the queue failed: {e}") from e
        oldest = [s for (_, s) in since0] + [s for (_, s) in cool0 + lease0 if s <= now]
        latency = max(0.0, now - min(oldest)) if oldest else 0.0
        return {
            "tracked": ready + cooling + leases + quarantined,
            "ready": ready + cool_due + lease_due,
            "cooling": cooling - cool_due,
            "in_flight": leases - lease_due,
            "quarantined": quarantined,
            "evicted": evicted,
            "queue_latency_s": round(latency, 3),
        }

    def quarantined(self, limit: int = 10) -> list[dict]:
        """The most recently quarantined torrents (at most ``limit``): info-hash, when, reason."""
        k = self.keys
        try:
            members = self.client.zrevrange(k.quarantined, 0, max(limit, 1) - 1, withscores=True)
            records = self.client.hmget(k.quarantine, [m for m, _ in members]) if members else []
        except redis.RedisError as e:
            raise StoreError(f"reading the quarantined torrents failed: {e}") from e
        out = []
        for (m, at), rec in zip(members, records):
            reason = json.loads(rec)["reason"] if rec else None
            out.append({"info_hash": m.decode(), "at": at, "reason": reason})
        return out

    def plan(self, info_hash: str) -> tuple[list[str], dict[str, float]]:
        """The torrent's own trackers (at most the per-torrent bound, a random draw of a larger
        set) and tracker -> not-before time, in one round trip."""
        k = self.keys
        cap = self.settings.max_trackers_per_torrent
        try:
            own, flat, _ = self._plan(keys=[k.trackers(info_hash), k.tracker_min_interval(info_hash)], args=[cap])
        except redis.RedisError as e:
            raise StoreError(f"reading the torrent's trackers failed: {e}") from e
        return ([u.decode() for u in own[:cap]],
                {flat[i].decode(): float(flat[i + 1]) for i in range(0, len(flat), 2)})

    def next_due(self, now: float | None = None) -> float | None:
        """Seconds until a claim could get something: 0 if a torrent is ready (or due, or its
        lease expired), else until the first cooling torrent is due or lease expires; None if
        nothing is tracked but evicted torrents."""
        now = time.time() if now is None else now
        k = self.keys
        p = self.client.pipeline(transaction=False)
        p.zcard(k.ready)
        p.zrange(k.cooling, 0, 0, withscores=True)
        p.zrange(k.leases, 0, 0, withscores=True)
        try:
            ready, cool0, lease0 = p.execute()
        except redis.RedisError as e:
            raise StoreError(f"reading the queue failed: {e}") from e
        if ready:
            return 0.0
        times = [t for (_, t) in cool0 + lease0]
        return max(0.0, min(times) - now) if times else None

    def visits_since(self, seconds: float = 3600, now: float | None = None, failed: bool = False) -> int:
        """Visits completed (or failed, with ``failed``) in the last ``seconds``; trims older buckets."""
        now = time.time() if now is None else now
        key = self.keys.failed_visits if failed else self.keys.visits
        buckets = self.client.hgetall(key)
        total, stale = 0, []
        for minute, n in buckets.items():
            m = int(minute)
            if m > now - seconds:
                total += int(n)
            elif m < now - VISIT_BUCKETS_KEPT:
                stale.append(minute)
        if stale:
            self.client.hdel(key, *stale)
        return total

    def trim_visit_buckets(self, now: float | None = None) -> int:
        """Drop the per-minute visit counts older than ``VISIT_BUCKETS_KEPT``; returns how many.

        ``status`` trims as it reads; workers call this hourly so the two
        hashes stay bounded (~2,900 fields each) when nobody runs ``status``.
        Raises ``StoreError``.
        """
        now = time.time() if now is None else now
        removed = 0
        try:
            for key in (self.keys.visits, self.keys.failed_visits):
                stale = [m for m in self.client.hkeys(key) if int(m) < now - VISIT_BUCKETS_KEPT]
                for i in range(0, len(stale), 1000):
                    removed += self.client.hdel(key, *stale[i : i + 1000])
        except redis.RedisError as e:
            raise StoreError(f"trimming visit counts failed: {e}") from e
        return removed

    def state(self, info_hash: str, now: float | None = None) -> tuple[str | None, float | None]:
        """The torrent's state and score, or (None, None) if not known."""
        now = time.time() if now is None else now
        k = self.keys
        p = self.client.pipeline(transaction=True)
        p.zscore(k.ready, info_hash)
        p.zscore(k.cooling, info_hash)
        p.zscore(k.leases, info_hash)
        p.zscore(k.evicted, info_hash)
        p.hget(k.held, info_hash)
        p.hget(k.tombstones, info_hash)
        p.zscore(k.quarantined, info_hash)
        ready, cooling, lease, evicted, held, tomb, quarantined = p.execute()
        if ready is not None:
            return "ready", ready
        if cooling is not None:
            return ("ready" if cooling <= now else "cooling"), float(held or 1)
        if lease is not None:
            return ("ready" if lease <= now else "in_flight"), float(held or 1)
        if evicted is not None:
            return "evicted", float(json.loads(tomb)["score"]) if tomb else None
        if quarantined is not None:
            return "quarantined", float(held or 1)
        return None, None

    def torrent(self, info_hash: str, now: float | None = None) -> dict | None:
        """Everything known about one torrent (SPEC §7 ``torrent``), or None."""
        now = time.time() if now is None else now
        state, score = self.state(info_hash, now)
        if state is None:
            return None
        k = self.keys
        p = self.client.pipeline(transaction=False)
        p.hgetall(k.torrent(info_hash))
        p.smembers(k.trackers(info_hash))
        p.hget(k.claims, info_hash)
        p.zscore(k.cooling, info_hash)
        p.zscore(k.leases, info_hash)
        p.hget(k.tombstones, info_hash)
        p.hgetall(k.tracker_min_interval(info_hash))
        p.hget(k.quarantine, info_hash)
        p.hget(k.expiries, info_hash)
        h, trackers, claims, due, deadline, tomb, min_intervals, quarantine, expiries = p.execute()
        h = {a.decode(): b.decode() for a, b in h.items()}

        def num(name: str, cast=int):
            return cast(h[name]) if name in h else None

        out = {
            "info_hash": info_hash,
            "state": state,
            "score": score,
            "visits": num("visits") or 0,
            "failed_visits": num("failed_visits") or 0,
            "claims": int(claims) if claims else 0,
            "last_visit": num("last_visit", float),
            "last_outcome": h.get("last_outcome"),
            "last_failure": num("last_failure", float),
            "last_error": h.get("last_error"),
            "seeders": num("seeders"),
            "leechers": num("leechers"),
            "peers_last_visit": num("peers_last_visit"),
            "trackers": sorted(t.decode() for t in trackers),
            "due": due if state in ("cooling",) else None,
            "lease_deadline": deadline if state == "in_flight" else None,
            "tracker_not_before": {a.decode(): float(b) for a, b in min_intervals.items()},
            "expired_leases_in_a_row": int(expiries) if expiries else 0,
        }
        if tomb:
            out["tombstone"] = json.loads(tomb)
        if quarantine and state == "quarantined":
            q = json.loads(quarantine)
            q["last_error"] = out["last_error"]
            q["message"] = q["reason"] + (f"; last error: {out['last_error']}" if out["last_error"]
                                          else "; no visit error recorded")
            out["quarantine"] = q
        return out
