"""Draining the StatHat outbox (contract §6): claim, post in batches, settle.

Strategy: the recorder adds increments to the outbox hash in the same Lua
step as the counters. A flush renames the outbox to an in-flight hash under
a leased claim (``take.lua``), so increments made meanwhile start a fresh
outbox and nothing is read twice, and reads it in HSCAN pages as its posts
need them (``_Batches``): a backlog of a million stats never holds Redis in
one reply, nor the process's memory. Each chunk StatHat accepts is deleted
from the in-flight hash and the lease renewed, in one ``settle.lua`` ack; on
a failed post, or out of time, the claim is released and the rest stays in
flight, where the next flush takes it at once ("recovered") and posts it
before the outbox; after a failure that flush waits out the backoff. A flusher that dies mid-flush
leaves the in-flight hash behind; once its lease lapses the next flush posts
it.

With several shards (contract §9) every shard has its own outbox, in-flight
hash and claim, each claimed and settled by one-slot calls, all shards'
calls pipelined in one round trip; a post carries stats of several shards
(a stat owed by two shards once, summed), and its ack settles each shard's
part. StatHat's totals are so the counters summed over the shards.

No double posts when a result is known: a post starts only while the claim
has at least a post's worst time (the client's whole-post timeout) plus a
margin left on it, and every ack renews the claim, so a live flusher's claim
never lapses while one of its posts is under way and no other flusher can
take the batch over then. A flusher stalled past its lease (a paused
process) acks what it posted if nobody took the batch meanwhile; if someone
did, its settle is refused and it stops at once. A whole flush is bounded
(``budget_seconds``; 3 s for the flush at shutdown): what is left then stays
in flight for the next flush, its claim released. The one
case that can double is a post whose result is unknown (StatHat accepted it
but the answer never came): it is put back and posted again, which the EZ
API gives no way to avoid.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable

import redis

from crawler import logs
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.stathat.client import EZClient, PostError
from crawler.store import patience
from crawler.store.hash_pages import pages
from crawler.store.outage import Once, Outage
from crawler.store.replica_wait import Wait
from crawler.store.scripts import register
from crawler.store.store import Store

log = logs.get("stathat")

# StatHat documents no batch limit; a few hundred stats keep a post small (<40 KB).
DEFAULT_CHUNK = 500
# Several posts (10 s timeout each) long, so a flusher renews it every chunk
# without ever waiting for it, and a dead flusher's batch waits a minute.
DEFAULT_LEASE_SECONDS = 60.0
# A flush of a large backlog (thousands of stats after an outage) ends after
# this long and leaves the rest to the next flush, so the worker's final flush
# at shutdown and ``peercrawl flush`` return in bounded time.
DEFAULT_BUDGET_SECONDS = 60.0
# Time kept free on the claim beyond a post's worst time: the settle round
# trip and clock granularity.
LEASE_MARGIN_SECONDS = 0.5
# The flush at shutdown: the worker waits 4 s for it (SHUTDOWN_MARGIN - 2 in
# workers/worker.py) before killing it, and a post killed midway has an unknown
# result; ending on its own leaves nothing in doubt.
FINAL_BUDGET_SECONDS = 3.0
# In the final flush, a post given less time than this is not started.
MIN_POST_SECONDS = 0.2


class _Batches:
    """The claimed in-flight hashes as one flush reads them: a page at a time
    (``hash_pages.pages``, every shard's pages in one round trip) as the chunks
    need them, so the process holds a chunk and a page, not the backlog
    (~200 MB of Python for a million stats read whole).

    What is held is sorted by stat, so a stat owed by several shards goes
    out once per post, summed. A chunk is acked before the next page is
    asked for unless a page outran it; a stat a page repeats while still
    held is skipped (``crawler.store.hash_pages``).
    """

    def __init__(self, client: redis.Redis, claimed: dict):
        self._reader = pages(client, claimed)
        self._more = bool(claimed)
        self._stats: list = []  # (stat, shard, count) read, not yet posted
        self._queued: set = set()  # their (shard, stat), and the zeros'
        self.zeros: dict = {}  # shard -> stats owed nothing: acked with the next chunk, never posted

    def next_chunk(self, size: int) -> list:
        """The next (at most) ``size`` stats to post, as ``(stat, shard, count)``; raises ``StoreError``."""
        try:
            while self._more and len(self._stats) < size:
                got = next(self._reader, None)
                if got is None:
                    self._more = False
                    break
                for i, page in got.items():
                    for f, v in page.items():
                        if (i, f) not in self._queued:
                            self._queued.add((i, f))
                            if int(v):
                                self._stats.append((f, i, int(v)))
                            else:
                                self.zeros.setdefault(i, []).append(f)
                self._stats.sort(key=lambda r: (r[0], r[1]))
        except redis.RedisError as e:
            raise StoreError(f"reading the StatHat batch failed: {e}") from e
        part, self._stats = self._stats[:size], self._stats[size:]
        return part

    def acks(self, part: list) -> dict:
        """settle.lua's acks (shard -> ["ack", stats...]) of ``part`` and of the zeros read so far,
        which are then forgotten: once deleted, no page can repeat them."""
        acks: dict = {}
        for f, i, _ in part:
            acks.setdefault(i, ["ack"]).append(f)
        for i, fs in self.zeros.items():
            acks.setdefault(i, ["ack"]).extend(fs)
        self.zeros = {}
        for i, a in acks.items():
            self._queued.difference_update((i, f) for f in a[1:])
        return acks


class Flusher:
    """Posts the outbox of ``keys``'s namespace to StatHat.

    ``settings``: ``stathat_ezkey`` (None: disabled), ``stathat_url``,
    ``stathat_families``, ``flush_seconds``, ``http_timeout``. ``sink``: an
    ``EZClient``-like object with ``post(data)`` (default: one for the
    settings). ``tracked``: reads ``torrents.count``, the queue's figure
    (``QueueView.tracked``, given by whoever assembles the flusher: this room
    posts figures, it does not read the queue); None: not posted.
    """

    def __init__(
        self,
        client: redis.Redis | Store,
        keys: Keys,
        settings,
        sink: EZClient | None = None,
        *,
        chunk: int = DEFAULT_CHUNK,
        lease_seconds: float | None = None,
        budget_seconds: float = DEFAULT_BUDGET_SECONDS,
        backoff_base: float = 1.0,
        backoff_max: float = 300.0,
        tracked: Callable[[], int] | None = None,
    ):
        self.store = Store.of(client)  # a worker's shares round trips with its visits' calls
        client = self.client = self.store.client
        self.keys, self.settings = keys, settings
        # the process's one Outage (crawler.store.outage): a Redis gone away is logged once, by whoever meets it first
        self.outage = patience.outage(client) or Outage(patience=settings.redis_wait_seconds)
        self.enabled = settings.stathat_ezkey is not None
        if sink is None and self.enabled:
            sink = EZClient(settings.stathat_url, settings.stathat_ezkey, timeout=settings.http_timeout)
        self.sink = sink
        self.chunk = max(1, chunk)
        self.budget_seconds = budget_seconds
        # The longest one post may take: the client's whole-post timeout.
        self.post_seconds = float(getattr(sink, "timeout", settings.http_timeout))
        if lease_seconds is None:  # a long PEERCRAWL_HTTP_TIMEOUT stretches the lease with it
            lease_seconds = max(DEFAULT_LEASE_SECONDS, 2 * self.post_seconds + LEASE_MARGIN_SECONDS)
        self.lease_seconds, self.lease_ms = lease_seconds, int(lease_seconds * 1000)
        if self.enabled and lease_seconds < self.post_seconds + LEASE_MARGIN_SECONDS:
            raise ValueError(f"the StatHat claim lease ({lease_seconds} s) must outlast a post "
                             f"({self.post_seconds} s) by {LEASE_MARGIN_SECONDS} s")
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        # torrents.count is the queue's figure (``status``' ``tracked``), read
        # by whoever assembles the flusher; without it this flusher posts none
        self.tracked = tracked
        self.post_count = "torrents.count" in settings.stathat_families and tracked is not None
        self.token = uuid.uuid4().hex
        # each shard's outbox, in-flight batch and claim (take.lua and settle.lua touch one shard)
        self._keys = [[k.outbox, k.outbox_in_flight, k.outbox_owner] for k in keys.all_counter_shards]
        self._held: dict[int, int] = {}  # shard -> claimed stats not yet acked, this flush
        self._claim = register(client, "take", package=__package__)
        self._settle = register(client, "settle", package=__package__)
        # PEERCRAWL_WAIT_REPLICAS: a claim reaches a replica before its batch is
        # posted, and an ack before the next claim (docs/redis.md, failover)
        self.wait = Wait.from_settings(settings)

    def flush_once(self, final: bool = False) -> dict:
        """Claim, post and settle once, within the flusher's budget.

        A post starts only while a whole post's time is left of the budget;
        ``final`` (the flush at shutdown): within ``FINAL_BUDGET_SECONDS``, each
        post's timeout cut to what is left.

        Returns ``{"enabled", "ok", "stats", "increments", "requests",
        "recovered", "busy", "lost", "deferred", "error"}``: ``stats`` counter
        stats posted, ``increments`` their summed counts, ``busy`` when another
        flusher holds the claim, ``lost`` when another flusher took this batch
        over mid-flush (this one stopped), ``deferred`` stats left in flight
        for the next flush when this one ran out of time. Raises
        ``StoreError`` if Redis fails; a failed post is ``ok: False`` with
        ``error`` (its stats left in flight, the claim released).
        """
        out = {"enabled": self.enabled, "ok": True, "stats": 0, "increments": 0, "requests": 0,
               "recovered": False, "busy": False, "lost": False, "deferred": 0, "error": None}
        if not self.enabled:
            return out
        started = time.monotonic()
        end = started + (min(self.budget_seconds, FINAL_BUDGET_SECONDS) if final else self.budget_seconds)
        least = MIN_POST_SECONDS if final else self.post_seconds  # the time a post needs to start
        self._held = {}
        taken = self._take(out)
        if taken is not None and (taken[0] or taken[1]):
            self._post_all(out, *taken, started, end, least)
        return out

    def _take(self, out: dict) -> tuple[dict, list] | None:
        """Claim every shard's outbox: (the in-flight hash of each shard claimed, the
        torrents.count stat to send), or None to stop.

        None when another flusher holds every claim that has something
        (``busy``). A shard whose claim is held elsewhere is left to that
        flusher (``busy``); torrents.count goes with shard 0's claim, so one
        flusher at a time posts it.
        """
        try:
            calls = [(self._claim, k, [self.token, self.lease_ms]) for k in self._keys]
            replies = self.store.run(calls, wait=self.wait)
            claimed = {}
            for i, reply in enumerate(replies):
                if reply[0] == 0:  # another flusher is posting this shard's batch
                    out["busy"] = True
                elif reply[0] == 1:
                    out["recovered"] = out["recovered"] or bool(reply[1])
                    claimed[i] = self._keys[i][1]
                    self._held[i] = int(reply[2])  # its stats, all ours to settle
            if out["busy"] and not claimed:
                return None
            lead = replies[0][0] != 0
            value = ([{"stat": "torrents.count", "value": self.tracked()}]
                     if self.post_count and lead and self.tracked is not None else [])  # post_count: tracked given
        except redis.RedisError as e:
            raise StoreError(f"claiming the StatHat outbox failed: {e}") from e
        return claimed, value

    def _post_all(self, out: dict, claimed: dict, value: list, started: float, end: float, least: float) -> None:
        """Post the batches ``claimed`` in chunks (``value`` with the first), settling each,
        until done or out of time (``_Batches`` reads them as the chunks need them)."""
        # Measured from before the claim was sent: Redis started the lease later.
        lease_end = started + self.lease_seconds
        batches, first = _Batches(self.client, claimed), True
        while True:
            part = batches.next_chunk(self.chunk)
            if not part and not batches.zeros and not (first and value):
                return
            now = time.monotonic()
            held = [i for i, left in self._held.items() if left]  # in-flight hashes ours to settle
            if end - now < least and held:
                self._defer(out, sum(self._held.values()), now - started)
                return
            if held and lease_end - now < self.post_seconds + LEASE_MARGIN_SECONDS:
                # Renew before posting (a stalled process): no post may outlive the claim.
                if not self._settle_calls({i: ["ack"] for i in held}):
                    out["lost"] = True
                    return
                lease_end = now + self.lease_seconds
            if end - now < least:  # torrents.count alone: skip it this time
                return
            if (part or (first and value)) and not self._post_part(
                    out, part, value if first else [], min(self.post_seconds, end - now), held):
                return
            first = False
            acks = batches.acks(part)
            for i, a in acks.items():
                self._held[i] -= len(a) - 1
            if acks:
                before = time.monotonic()
                if not self._settle_calls(acks):
                    out["lost"] = True
                    return
                lease_end = before + self.lease_seconds

    def _post_part(self, out: dict, part: list, value: list, timeout: float, held: list) -> bool:
        """Post the stats ``part`` (a stat owed by several shards once, summed) and ``value``;
        False when the post failed."""
        owed: dict = {}
        for f, _, c in part:
            owed[f] = owed.get(f, 0) + c
        data = [{"stat": f.decode("utf-8", "replace"), "count": c} for f, c in owed.items()] + value
        if not self._post(out, data, timeout, held):
            return False
        out["stats"] += len(part)
        out["increments"] += sum(c for _, _, c in part)
        return True

    def _defer(self, out: dict, stats: int, after: float) -> None:
        """Out of time: release the claims, the stats left in flight for the next flush (``deferred``)."""
        out["deferred"] = stats
        if self._settle_calls({i: ["release"] for i, left in self._held.items() if left}):
            log.info("stathat_flush_deferred", stats=stats, after_s=round(after, 1))
        else:
            out["lost"], out["deferred"] = True, 0

    def _post(self, out: dict, data: list, timeout: float, held: list) -> bool:
        """One post; False when it failed (the claims released, ``error`` set)."""
        out["requests"] += 1
        assert self.sink is not None  # flush_once posts only when enabled, and an enabled flusher has its sink
        try:
            self.sink.post(data, timeout=timeout)
        except PostError as e:
            out["ok"], out["error"] = False, str(e)
            if held and not self._settle_calls({i: ["release"] for i in held}):
                out["lost"] = True
            log.warning("stathat_post_failed", error=str(e), stats_in_flight=sum(self._held.values()))
            return False
        return True

    def _settle_calls(self, args: dict[int, list]) -> bool:
        """Run settle.lua for each shard of ``args`` (shard -> its mode and fields), in one round trip;
        False (logged) when another flusher took one of their batches over."""
        calls = [(self._settle, self._keys[i][1:], [self.token, self.lease_ms] + a) for i, a in args.items()]
        try:
            settled = self.store.run(calls, wait=self.wait)
        except redis.RedisError as e:
            raise StoreError(f"settling the StatHat outbox failed: {e}") from e
        if not all(settled):
            log.warning("stathat_claim_lost", note="another flusher took over this batch; stopping")
        return all(settled)

    def run_forever(self, stop_event: threading.Event, sweep=None) -> None:
        """Flush every ``flush_seconds`` until ``stop_event`` is set, then flush once more (briefly).

        After a failure, waits ``backoff_base * 2**k`` (jittered, at most
        ``backoff_max``) instead. ``sweep``: an optional callable run each
        cycle (the worker passes ``Recorder.sweep``). Waits with
        ``stop_event.wait``, which yields to other greenlets under gevent.
        """
        failures = 0
        while not stop_event.is_set():
            delay = self.settings.flush_seconds
            try:
                result = self.flush_once()
                failures = 0 if result["ok"] else failures + 1
                if sweep is not None:
                    sweep()
                self.outage.ok()
            except StoreError as e:
                failures += 1
                if not self.outage.failed(e, "stathat flush"):
                    log.warning("stathat_flush_failed", error=str(e))
            if failures:
                delay = min(self.backoff_max, self.backoff_base * 2 ** (failures - 1))
                delay *= random.uniform(0.8, 1.2)
            stop_event.wait(delay)
        try:
            with Once():  # shutdown does not wait for a Redis that went away
                self.flush_once(final=True)
        except StoreError as e:  # pragma: no cover - shutdown with Redis gone
            log.warning("stathat_final_flush_failed", error=str(e))
