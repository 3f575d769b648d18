"""The read model of the torrent lifecycle (contract §1, §7): what the queue holds, never a change to it.

``crawler.queue.queue.Queue`` owns the torrent states and is the only writer of
them; ``QueueView`` reads the same keys for everyone who only looks: ``status``
and the dashboard (state counts, quarantined torrents, visits per hour), the
``torrent`` command (one torrent's record), the worker pool (how long until
something is due), the autoscaler (queue latency) and the StatHat flusher
(``torrents.count``). Apart, a reader needs no Lua scripts and no settings,
and a reader holds no method that could change a torrent's state.

The view interprets the sets as users see them: a cooling torrent past its
due time, or a lease past its deadline, is shown as ready (the next claim
moves it there). Each method is one round trip. A sharded queue (contract §9) is
read shard by shard in that one pipeline and summed; one torrent is read in
its own shard. ``state`` and a one-shard ``counts`` run as a MULTI, so their
figures are from one instant; a sharded crawl's counts are each shard's at
its own instant (no transaction spans slots), so a torrent moving between
two states while the pipeline runs can be counted in neither or both. Redis
errors are raised as ``StoreError``.
"""

from __future__ import annotations

import json
import time

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue import coverage, torrent_record
from crawler.queue.lanes import DEFAULT, LANES, MARKED
from crawler.queue.rates import rates_report

# The states status counts, in the order it shows them (the crawl's and each lane's).
STATES = ("ready", "cooling", "in_flight", "quarantined", "evicted")


def _pages(client: redis.Redis, key: str, page: int):
    """The members of sorted set ``key``, ``page`` at a time (ZSCAN: never one long command)."""
    members: list = []
    for member, _ in client.zscan_iter(key, count=page):
        members.append(member)
        if len(members) >= page:
            yield members
            members = []
    if members:
        yield members


def _ask_lane(p, k: Keys, info_hash: str) -> None:
    """Queue on ``p`` the reads ``_lane_of`` answers from: the torrent in each lane's member set."""
    for lane in MARKED:
        p.zscore(k.lane_members(lane), info_hash)


def _lane_of(scores: list) -> str:
    """The lane of ``_ask_lane``'s replies (``normal`` when in no member set)."""
    return next((lane for lane, x in zip(MARKED, scores) if x is not None), DEFAULT)


class QueueView:
    """Reads of one namespace's score queue. ``client``: a redis-py client (bytes responses)."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client = client
        self.keys = keys

    def _run(self, pipe: redis.client.Pipeline, what: str) -> list:
        try:
            return pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"reading {what} failed: {e}") from e

    def _each_shard(self, read, what: str) -> list[list]:
        """``read(pipe, shard_keys)`` queued for every shard in one pipeline; each shard's replies.

        One shard: a MULTI, so the figures are of one instant.
        """
        shards = self.keys.all_shards
        p = self.client.pipeline(transaction=len(shards) == 1)
        sizes = []
        for k in shards:
            before = len(p)
            read(p, k)
            sizes.append(len(p) - before)
        flat, out, i = self._run(p, what), [], 0
        for n in sizes:
            out.append(flat[i : i + n])
            i += n
        return out

    def tracked(self) -> int:
        """``torrents.count``: every torrent not evicted, as ``counts`` has it (raises ``StoreError``)."""
        return self.counts()["tracked"]

    def counts(self, now: float | None = None) -> dict:
        """State counts as users see them (contract §7 status).

        ``tracked`` is every torrent not evicted: ready, cooling, in flight
        and quarantined (contract §1: a quarantined torrent is kept until
        readmitted). ``queue_latency_s``: how long the oldest ready torrent
        has been past its due time.
        """
        now = time.time() if now is None else now

        def read(p, k):
            p.zcount(k.cooling, "-inf", now)
            p.zcard(k.cooling)
            p.zcount(k.leases, "-inf", now)
            p.zcard(k.leases)
            p.zcard(k.evicted)
            p.zrange(k.since, 0, 0, withscores=True)
            p.zrange(k.cooling, 0, 0, withscores=True)
            p.zrange(k.leases, 0, 0, withscores=True)
            p.zcard(k.quarantined)
            for lane in LANES:  # last: r[-4:]
                p.zcard(k.ready_in(lane))

        ready = cool_due = cooling = lease_due = leases = evicted = quarantined = 0
        oldest = []
        for r in self._each_shard(read, "the queue"):
            cool_due, cooling, lease_due, leases, evicted = (
                a + b for a, b in zip((cool_due, cooling, lease_due, leases, evicted), r[:5]))
            since0, cool0, lease0 = r[5:8]
            quarantined += r[8]
            ready += sum(r[-len(LANES):])
            oldest += [s for (_, s) in since0] + [s for (_, s) in cool0 + lease0 if s <= now]
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
        limit = max(limit, 1)
        per_shard = self._each_shard(lambda p, k: p.zrevrange(k.quarantined, 0, limit - 1, withscores=True),
                                     "the quarantined torrents")
        latest = sorted(((at, m.decode()) for (got,) in per_shard for m, at in got), reverse=True)[:limit]
        p = self.client.pipeline(transaction=False)
        for _, h in latest:
            p.hget(self.keys.for_torrent(h).quarantine, h)
        records = self._run(p, "the quarantined torrents")
        out = []
        for (at, h), rec in zip(latest, records):
            reason = json.loads(rec)["reason"] if rec else None
            out.append({"info_hash": h, "at": at, "reason": reason})
        return out

    def next_due(self, now: float | None = None) -> float | None:
        """Seconds until a claim could get something: 0 if a torrent is ready (or due, or its
        lease expired), else until the first cooling torrent is due or lease expires; None if
        nothing is tracked but evicted torrents."""
        now = time.time() if now is None else now

        def read(p, k):
            p.zrange(k.cooling, 0, 0, withscores=True)
            p.zrange(k.leases, 0, 0, withscores=True)
            for lane in LANES:
                p.zcard(k.ready_in(lane))

        times = []
        for cool0, lease0, *ready in self._each_shard(read, "the queue"):
            if any(ready):
                return 0.0
            times += [t for (_, t) in cool0 + lease0]
        return max(0.0, min(times) - now) if times else None

    def lane(self, info_hash: str) -> str:
        """The lane of a torrent (``normal`` when it is in no other's member set)."""
        p = self.client.pipeline(transaction=False)
        _ask_lane(p, self.keys.for_torrent(info_hash), info_hash)
        return _lane_of(self._run(p, "a torrent's lane"))

    def lanes(self, now: float | None = None, page: int = 1000, totals: dict | None = None) -> dict:
        """Every state per lane (contract §1 lanes): ``{lane: {ready, cooling, in_flight, quarantined,
        evicted}}``, counted as ``counts`` counts them.

        A lane's ready set is counted whole; its other states by reading its
        member set page by page against the state sets (so a status never holds
        Redis long, and a lane changing meanwhile may be off by what moved). The
        normal lane is the crawl's totals (``totals``: ``counts``' answer
        when the caller has it) less the other lanes.
        """
        now = time.time() if now is None else now
        out = {lane: dict.fromkeys(STATES, 0) for lane in LANES}
        try:
            for k in self.keys.all_shards:
                for lane in MARKED:
                    row = out[lane]
                    row["ready"] += self.client.zcard(k.ready_in(lane))
                    for members in _pages(self.client, k.lane_members(lane), page):
                        p = self.client.pipeline(transaction=False)
                        for key in (k.cooling, k.leases, k.quarantined, k.evicted):
                            p.zmscore(key, members)
                        cooling, leases, quarantined, evicted = p.execute()
                        for c, le, q, e in zip(cooling, leases, quarantined, evicted):
                            if c is not None:
                                row["ready" if c <= now else "cooling"] += 1
                            elif le is not None:
                                row["ready" if le <= now else "in_flight"] += 1
                            row["quarantined"] += q is not None
                            row["evicted"] += e is not None
        except redis.RedisError as e:
            raise StoreError(f"reading the lanes failed: {e}") from e
        totals = totals or self.counts(now)
        for state in out[DEFAULT]:
            out[DEFAULT][state] = totals[state] - sum(out[lane][state] for lane in MARKED)
        return out

    def at_risk(self, now: float | None = None, limit: int = 10) -> dict:
        """Torrents whose next visit without peers evicts them (contract §1 staged eviction).

        ``at_risk``: how many, and up to ``limit`` of them, soonest at risk
        first, each with its stage; ``at_risk_later``: those one such visit
        would bring below the threshold once their grace has run.
        """
        now = time.time() if now is None else now

        def read(p, k):
            p.zcount(k.atrisk, "-inf", now)
            p.zcard(k.atrisk)
            p.zrangebyscore(k.atrisk, "-inf", now, start=0, num=limit, withscores=True)

        now_n = later = 0
        first: list[tuple[float, str]] = []
        for n, total, rows in self._each_shard(read, "the torrents at risk"):
            now_n, later = now_n + n, later + total - n
            first += [(t, m.decode()) for m, t in rows]
        first = sorted(first)[:limit]
        p = self.client.pipeline(transaction=False)
        for _, h in first:
            p.hmget(self.keys.for_torrent(h).torrent(h), "last_peers", "first_visit")
        stages = self._run(p, "the torrents at risk") if first else []
        listed = [{"info_hash": h, "since": t,
                   "stage": "lost its peers" if last else "never had peers",
                   "last_peers": float(last) if last else None}
                  for (t, h), (last, _) in zip(first, stages)]
        return {"at_risk": now_n, "at_risk_later": later, "at_risk_torrents": listed}

    def rates(self, now: float | None = None) -> dict:
        """The operator rates of the last hour (``crawler.queue.rates``), over every shard."""
        now = time.time() if now is None else now
        return rates_report(self._rates(), now)

    def coverage(self, now: float | None = None) -> dict:
        """The catalogue's coverage over the last hour (``crawler.queue.coverage``), over every shard."""
        return coverage.catalogue(self._rates(), time.time() if now is None else now)

    def _rates(self) -> list[dict]:
        return [h for (h,) in self._each_shard(lambda p, k: p.hgetall(k.rates), "the queue's rates")]

    def visits_since(self, seconds: float = 3600, now: float | None = None, failed: bool = False) -> int:
        """Visits completed (or failed, with ``failed``) in the last ``seconds``.

        Sums the per-minute counts ``complete.lua`` and ``defer.lua`` keep;
        dropping old minutes is the queue's (``Queue.trim_visit_buckets``).
        """
        now = time.time() if now is None else now
        per_shard = self._each_shard(lambda p, k: p.hgetall(k.failed_visits if failed else k.visits),
                                     "the visit counts")
        return sum(int(n) for (buckets,) in per_shard for minute, n in buckets.items()
                   if int(minute) > now - seconds)

    def state(self, info_hash: str, now: float | None = None) -> tuple[str | None, float | None]:
        """The torrent's state and score, or (None, None) if not known."""
        now = time.time() if now is None else now
        k = self.keys.for_torrent(info_hash)
        p = self.client.pipeline(transaction=True)
        for lane in LANES:
            p.zscore(k.ready_in(lane), info_hash)
        p.zscore(k.cooling, info_hash)
        p.zscore(k.leases, info_hash)
        p.zscore(k.evicted, info_hash)
        p.hget(k.held, info_hash)
        p.hget(k.tombstones, info_hash)
        p.zscore(k.quarantined, info_hash)
        *readies, cooling, lease, evicted, held, tomb, quarantined = self._run(p, "a torrent's state")
        ready = next((r for r in readies if r is not None), None)
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

    def torrent(self, info_hash: str, now: float | None = None, defaults: tuple[str, ...] = ()) -> dict | None:
        """Everything known about one torrent (contract §7 ``torrent``), or None.

        ``defaults``: the default trackers, which every visit asks besides the torrent's own (they name
        the last visit's sources, ``source_notes.read_last``)."""
        now = time.time() if now is None else now
        state, score = self.state(info_hash, now)
        if state is None:
            return None
        k = self.keys.for_torrent(info_hash)
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
        p.get(k.history(info_hash))
        p.zscore(k.atrisk, info_hash)
        _ask_lane(p, k, info_hash)
        h, trackers, claims, due, deadline, tomb, min_intervals, quarantine, expiries, hist, at_risk, *lanes = (
            self._run(p, "a torrent"))
        return torrent_record.record(info_hash, state, score, now, defaults, fields=h, trackers=trackers,
                                     claims=claims, due=due, deadline=deadline, tomb=tomb,
                                     min_intervals=min_intervals, quarantine=quarantine, expiries=expiries,
                                     history=hist, at_risk=at_risk, lane=_lane_of(lanes))


