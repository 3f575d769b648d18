"""The torrent lifecycle of contract §1: the one module that changes a torrent's state.

Each state is a sorted set under the namespace: ``ready`` (by score; one per
lane, ``crawler.queue.lanes``), ``cooling`` (by due time), ``leases`` (in
flight, by lease deadline), ``evicted`` and ``quarantined`` (by when). A
torrent is a member of exactly one. Every transition is one Lua script
beside this module (``TRANSITIONS``), run as one atomic step, which checks
its arguments and reads everything before its first write and slices every
multi-value command (Redis keeps a failed script's earlier writes): no
crash between two commands can lose or duplicate a torrent. While a torrent
is out of ``ready`` its score waits in the ``held`` hash (none: 1.0). What
each call sends and answers is ``script_calls``'s; admission's batching is
``admission``'s.

A claim's token is the torrent's claim count after the claim; extend,
complete, defer and release check it, so a worker whose lease expired (and
whose torrent another worker has since claimed) changes nothing.
Housekeeping runs inside every claim, bounded per call: no janitor process,
and a dead worker's torrents come back as soon as anyone claims. Each
expired lease raises the torrent's streak in ``expiries`` (a completion or
a deferral ends it); at the ``PEERCRAWL_QUARANTINE_AFTER``-th in a row the
torrent is quarantined rather than retried for ever, its reason kept, and
``add --readmit`` puts it back.

Shards (contract §9): each shard has its own sets under its own hash tag
(``Keys.for_torrent``); every script runs in the torrent's shard, a claim in
the shard offering the best score (``shard_tops``). A one-shard queue is
exactly the queue of a single Redis. Trackers per torrent are bounded
(``PEERCRAWL_MAX_TRACKERS_PER_TORRENT``) by ``add.lua`` and ``plan.lua``
(``visit_plan``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import redis

from crawler.errors import StoreError
from crawler.keys import Keys, shard_of
from crawler.observer import QUIET, Observer
from crawler.queue import script_calls
from crawler.queue.admission import ADD_BATCH, ADD_PIPELINE, Admission
from crawler.queue.rates import asked_field
from crawler.queue.scoring import Outcome
from crawler.queue.script_calls import ADD_STATUS, Completion, Lease, lane_keys, member_keys, minute
from crawler.queue.shard_tops import ShardTops
from crawler.queue.visit_buckets import trim_visit_buckets
from crawler.queue.visit_plan import Planned, VisitPlan
from crawler.settings import Settings
from crawler.store import scripts
from crawler.store.store import Store
from crawler.torrents.items import NewItem


class Transition(NamedTuple):
    """A step of the lifecycle: the states it takes a torrent from and to."""

    source: str
    target: str


# Contract §1's lifecycle: each script beside this module (``<name>.lua``) and what it does.
TRANSITIONS = {
    "add": Transition("not tracked; evicted or quarantined with --readmit",
                      "cooling, due now (a lane's ready at once for high, low and discovered)"),
    "claim": Transition("ready (housekeeping first: due cooling to ready, expired leases back)",
                        "in flight; the K-th expired lease in a row: quarantined"),
    "extend": Transition("in flight", "in flight, its lease pushed on"),
    "complete": Transition("in flight", "cooling with the visit's new score, or evicted"),
    "defer": Transition("in flight", "cooling, score kept (a failed visit is counted as one)"),
    "release": Transition("in flight", "ready, unvisited (a stopping worker)"),
}

# Most torrents one claim call may lease: it bounds one call's Redis time (a
# claim of 2,000 also moves up to 4,008 due torrents: tens of ms); a pool
# larger than this claims again at once.
MAX_CLAIM = 2000
# Most visits one complete.lua call completes: each is ~15 us of Redis, so a
# call stays under ~2 ms while other clients wait.
MAX_COMPLETIONS = 128

__all__ = ["ADD_BATCH", "ADD_PIPELINE", "ADD_STATUS", "MAX_CLAIM", "MAX_COMPLETIONS", "TRANSITIONS", "Completion",
           "Lease", "Queue"]


class Queue:
    """The score queue in Redis. Every method is one atomic step.

    Reads of what it holds are ``crawler.queue.view.QueueView``'s; here are
    the steps that change it and the one read a visit needs (``plan``).

    ``client``: a redis-py client (bytes responses); ``keys``: the namespace's
    key names; ``settings``: lease, revisit, retry and scoring settings.
    Redis errors are raised as ``StoreError``.
    """

    def __init__(self, client: redis.Redis | Store, keys: Keys, settings: Settings, observer: Observer = QUIET):
        self.store = Store.of(client)  # a worker's: its script calls share round trips
        client = self.client = self.store.client
        self.keys, self.settings, self.observer = keys, settings, observer
        run = {name: scripts.register(client, name, __package__) for name in TRANSITIONS}
        self._claim, self._extend, self._complete = run["claim"], run["extend"], run["complete"]
        self._defer, self._release = run["defer"], run["release"]
        self.admission = Admission(self.store, keys, settings, run["add"], self._arrived)
        self.plans = VisitPlan(self.store, keys, settings)
        self.tops = ShardTops(keys.shards)

    # --- intake ------------------------------------------------------------
    def add(self, items: Sequence[NewItem], readmit: bool = False, now: float | None = None,
            on_dropped: Callable[[NewItem, int], None] | None = None, lane: str | None = None,
            move: bool = True) -> list[str]:
        """Admit ``items``, all at ``now``; one status per item (``Admission.add``)."""
        return self.admission.add(items, readmit, now, on_dropped, lane, move)

    def add_stream(self, items: Iterable[NewItem], readmit: bool = False, **options) -> Iterator[tuple[NewItem, str]]:
        """Admit a long stream of items in pipelined batches, yielding (item, status)
        (``Admission.add_stream``: ``batch``, ``pipeline``, ``on_dropped``, ``now``, ``lane``, ``move``)."""
        return self.admission.add_stream(items, readmit, **options)

    # --- work ----------------------------------------------------------------
    def _claim_args(self, count: int, now: float, k: Keys | None = None, asked: int | None = None) -> dict:
        """``script_calls.claim_args`` in shard ``k`` (default: the first); ``asked`` (default
        ``count``; 0 for the next shards of a claim spread over several)."""
        return script_calls.claim_args(self.keys.shard(0) if k is None else k, self.settings, count, now,
                                       count if asked is None else asked, self.keys.shards > 1)

    def _choose(self, now: float, tried: set[int]) -> int | None:
        """The shard to claim from next (``ShardTops``), after the housekeeping of every stale
        shard in one pipelined round trip (it moves due torrents into ready, so their scores count)."""
        stale = [i for i in self.tops.stale(now) if i not in tried]
        if stale:
            self._housekeep(stale, now)
        return self.tops.choose(now, tried)

    def _housekeep(self, shards: Iterable[int], now: float) -> None:
        """``claim.lua`` claiming nothing in each of ``shards``, in one round trip; notes their offers."""
        shards = list(shards)
        calls = [(self._claim, a["keys"], a["args"])
                 for a in (self._claim_args(0, now, self.keys.shard(i)) for i in shards)]
        for i, flat in zip(shards, self.store.run(calls)):
            self.tops.note(i, flat[-1], now)

    def claim(self, count: int = 1, now: float | None = None) -> list[Lease]:
        """Lease up to ``count`` (at most ``MAX_CLAIM``) of the highest-scored ready torrents.

        Sharded: from the shard offering the best score, then the next best
        while fewer than ``count`` came, each shard at most once. The observer
        is told how long it took.
        """
        t = time.perf_counter()
        try:
            return self._claim_shards(count, time.time() if now is None else now, asked=True)
        finally:
            self.observer.claimed(time.perf_counter() - t)

    def _claim_shards(self, count: int, now: float, asked: bool) -> list[Lease]:
        """``claim``; ``asked``: count ``count`` as asked for in the rates (not for the rest of a
        claim some of which another call already asked for)."""
        count = max(0, min(count, MAX_CLAIM))
        if count == 0:
            self.housekeep(now)
            return []
        leases: list[Lease] = []
        tried: set[int] = set()
        try:
            while len(leases) < count:
                i = self._choose(now, tried) if self.keys.shards > 1 else (None if tried else 0)
                if i is None:
                    break
                tried.add(i)
                first = len(tried) == 1  # the claim is counted as asked once, where it is first sent
                flat = self._claim(**self._claim_args(count - len(leases), now, self.keys.shard(i),
                                                      count if asked and first else 0))
                self.tops.note(i, flat[-1], now)
                leases += script_calls.leases(flat, now)
            if asked and not tried:
                # every shard is known empty: no claim went out, but the ask counts in the serve rate
                self.client.hincrby(self.keys.shard(0).rates, asked_field(minute(now)), count)
        except redis.RedisError as e:
            raise StoreError(f"claiming torrents failed: {e}") from e
        if len(tried) > 1:  # ZPOPMAX's order across the shards claimed from
            leases.sort(key=lambda lease: (lease.score, lease.info_hash), reverse=True)
        return leases

    def housekeep(self, now: float | None = None) -> None:
        """Run the claim's housekeeping in every shard without claiming anything."""
        now = time.time() if now is None else now
        try:
            self._housekeep(range(self.keys.shards), now)
        except redis.RedisError as e:
            raise StoreError(f"claiming torrents failed: {e}") from e

    def extend(self, lease: Lease, now: float | None = None) -> bool:
        """Push the lease deadline to now + lease time; False if the lease was lost."""
        now = time.time() if now is None else now
        try:
            k = self.keys.for_torrent(lease.info_hash)
            return bool(self._extend(keys=[k.leases, k.claims],
                                     args=[lease.info_hash, lease.token, repr(now + self.settings.lease_seconds)]))
        except redis.RedisError as e:
            raise StoreError(f"extending a lease failed: {e}") from e

    def complete(self, lease: Lease, result: Outcome, *, peers: int = 0, seeders: int | None = None,
                 leechers: int | None = None, due: float | None = None, now: float | None = None,
                 reported: int | None = None, new: int = 0, estimated: bool = False,
                 notes: list | None = None, sent: float | None = None) -> tuple[str, float | None]:
        """Apply a scored visit: ("cooling"|"evicted", new score) or ("stale", None).

        ``due``: when the torrent may be visited again (default now + revisit); ``reported``, ``new``
        and ``estimated``: the coverage figures (``crawler.queue.coverage``); ``notes``: the visit's
        source notes (``VisitPlan.note_args``), written in the same step, first, whatever the
        lease's state; ``sent``: when the completion leaves (the end of the visit's round trip; None:
        ``now``). ``complete_many`` completes many visits in fewer steps.
        """
        now = time.time() if now is None else now
        (answer,) = self.complete_many([Completion(lease, result, now, peers, seeders, leechers, due, reported, new,
                                                   estimated, notes, sent)])
        if isinstance(answer, StoreError):
            raise answer
        return answer

    def complete_many(self, visits: Sequence[Completion]) -> list[tuple[str, float | None] | StoreError]:
        """``complete``'s answer for each of ``visits``, or the ``StoreError`` of one whose torrent's
        stored values are damaged or whose call was refused: one complete.lua call a shard (at most
        ``MAX_COMPLETIONS`` visits each), all in one round trip. Raises ``StoreError`` when the
        round trip fails."""
        calls, order = [], []
        for k, part in self.keys.by_shard((c.lease.info_hash for c in visits), MAX_COMPLETIONS):
            a = script_calls.complete_args(k, self.settings, [visits[i] for i in part])
            calls.append((self._complete, a["keys"], a["args"]))
            order.append(part)
        try:
            replies = self.store.run(calls, errors=True)
        except redis.RedisError as e:
            raise StoreError(f"completing a visit failed: {e}") from e
        out: list = [None] * len(visits)
        for part, reply in zip(order, replies):
            if isinstance(reply, Exception):
                for i in part:
                    out[i] = StoreError(f"completing a visit failed: {reply}")
                continue
            for i, answer in zip(part, reply):
                out[i] = self._completed(visits[i], answer)
        return out

    def _completed(self, c: Completion, reply: list) -> tuple[str, float | None] | StoreError:
        """One visit's answer in a complete.lua reply; a torrent back to cooling is noted in its shard."""
        state = reply[0].decode()
        if state == "error":
            return StoreError(reply[1].decode())
        if state == "cooling":
            self._arrived(c.lease.info_hash, c.now + self.settings.revisit_seconds if c.due is None else c.due,
                          c.now)
        return state, (float(reply[1]) if len(reply) > 1 else None)

    def _arrived(self, info_hash: str, at: float, now: float, score: float | None = None) -> None:
        """This process put ``info_hash`` back, claimable at ``at``: its shard's estimate knows at once.

        ``score``: what its shard then offers (``crawler.queue.lanes.offer``), None when unknown."""
        if self.keys.shards > 1:
            self.tops.arrived(shard_of(info_hash, self.keys.shards), at, now, score)

    def fail(self, lease: Lease, error: str = "", now: float | None = None, due: float | None = None) -> bool:
        """A visit no source answered: score kept, retry after the retry delay."""
        now = time.time() if now is None else now
        due = now + self.settings.retry_seconds if due is None else due
        k = self.keys.for_torrent(lease.info_hash)
        try:
            done = bool(self._defer(
                keys=[k.leases, k.claims, k.cooling, k.expiries, k.torrent(lease.info_hash), k.failed_visits,
                      *member_keys(k, lease.lane)],
                args=[lease.info_hash, lease.token, repr(due), repr(now), minute(now), error[:200]]))
        except redis.RedisError as e:
            raise StoreError(f"recording a failed visit failed: {e}") from e
        if done:
            self._arrived(lease.info_hash, due, now)
        return done

    def defer(self, lease: Lease, due: float) -> bool:
        """Back to cooling until ``due`` unvisited: score kept, no visit or failure counted.

        False if the lease was not this holder's any more (nothing changed).
        """
        k = self.keys.for_torrent(lease.info_hash)
        try:
            done = bool(self._defer(keys=[k.leases, k.claims, k.cooling, k.expiries, *member_keys(k, lease.lane)],
                                    args=[lease.info_hash, lease.token, repr(due)]))
        except redis.RedisError as e:
            raise StoreError(f"deferring a torrent failed: {e}") from e
        if done:
            self._arrived(lease.info_hash, due, time.time())
        return done

    def note_error(self, info_hash: str, error: str, now: float | None = None) -> None:
        """Keep ``error`` as the torrent's last error, its state untouched.

        For a visit that crashed in its worker: the lease is left to expire
        (and counts towards quarantine), and ``torrent`` shows why. One HSET of
        two informational fields, so no script is needed. Raises ``StoreError``.
        """
        now = time.time() if now is None else now
        try:
            self.client.hset(self.keys.for_torrent(info_hash).torrent(info_hash), mapping={"last_failure": repr(now),
                                                                     "last_error": error[:200]})
        except redis.RedisError as e:
            raise StoreError(f"recording a visit error failed: {e}") from e

    def release(self, lease: Lease, now: float | None = None) -> bool:
        """Hand a claimed torrent back to ready unvisited (shutdown)."""
        now = time.time() if now is None else now
        k = self.keys.for_torrent(lease.info_hash)
        try:
            done = bool(self._release(keys=[k.leases, k.held, k.claims, k.ready, k.since, *lane_keys(k)],
                                      args=[lease.info_hash, lease.token, repr(now)]))
        except redis.RedisError as e:
            raise StoreError(f"handing back a torrent failed: {e}") from e
        if done:
            self._arrived(lease.info_hash, now, now)  # its lane unknown here: its shard is read again
        return done

    # --- trackers and visit counts ------------------------------------------
    def plan(self, info_hash: str) -> Planned:
        """The trackers a visit of ``info_hash`` may ask, its source notes and when its metadata may be
        fetched (``VisitPlan.plan``)."""
        return self.plans.plan(info_hash)

    def plan_many(self, hashes: Sequence[str], defaults: tuple[str, ...]) -> list[tuple[list[str], Planned]]:
        """``plan`` of each of ``hashes`` with the trackers a visit asks, ``defaults`` first, in one round
        trip (``VisitPlan.with_trackers``)."""
        return self.plans.with_trackers(hashes, defaults)

    def hold_trackers(self, info_hash: str, not_before: dict[str, float], ttl: float) -> None:
        """Ask no tracker of ``not_before`` before its time, for ``ttl`` s (``VisitPlan.hold_trackers``)."""
        self.plans.hold_trackers(info_hash, not_before, ttl)

    def trim_visit_buckets(self, now: float | None = None) -> int:
        """Drop the per-minute visit and failed-visit counts and the rates' minutes nobody reads any more
        (``crawler.queue.visit_buckets``); returns how many visit counts were dropped.

        ``status`` and the dashboard run it before they read
        (``crawler.report.queue_report.queue_report``) and workers hourly. Raises ``StoreError``.
        """
        return trim_visit_buckets(self.client, self.keys, time.time() if now is None else now)
