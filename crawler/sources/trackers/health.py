"""Tracker health shared by every worker through Redis (contract §3).

Strategy: ``keys.tracker_health`` maps a tracker URL to JSON ``{answers,
failures, refusals, last_refusal, last_failure, blocked, last_blocked, streak,
until, cut, cap, used}``, updated
only by ``tracker_health.lua``. After ``threshold`` consecutive failures a
tracker backs off for ``base`` seconds, doubling with each further failure up
to ``max``; one answer resets it. A backing-off tracker is skipped by every
worker without network traffic.

Three outcomes of an announce:

- an answer (peers, possibly none);
- a refusal: the tracker answered with an error (BEP 15 error action, HTTP
  ``failure reason``, e.g. "torrent not registered"). It is alive, so a
  refusal resets the failure streak and never backs a tracker off, but it is
  counted apart from answers, with its last message, so that a tracker that
  refuses every torrent shows as such in ``status``;
- a failure (silence, garbage, any exception in the exchange): counted, and
  the streak that backs off grows.

Besides, per tracker: ``cut``, the peers dropped from its replies past the
per-source bound (``Settings.source_peers_factor``), and ``cap``, the most
entries it hands out per reply when that is below what we ask (learned from
replies, see ``Trackers``; it rises with any longer reply, and falls only
after ``CAP_CONFIRM_SECONDS`` without a reply confirming it); ``min(configured
max, cap)`` is its max for §2's "full".

A busy worker announces thousands of times a second, so Redis is not asked
per announce: each process reads a tracker's state at most once per
``refresh`` seconds (one greenlet reads it while the others keep the state
it replaces) and batches answers and refusals, writing them
``flush`` seconds after the first one batched (a timer, so they reach Redis
while the crawl runs, however few visits follow). Failures, the first answer after failures (the
recovery) and a newly learned cap are written at once so that other workers
learn them quickly.

Pruning: each write sets the tracker's last-used time (``keys.tracker_used``).
A tracker unused for ``prune_after`` seconds is a candidate; the health of a
candidate no torrent names any more (``tracker_names.named``: every torrent
not evicted, the ``named_always`` default trackers) is removed with its
index and rank, in one atomic step that first checks the candidate is still
unused (``tracker_prune.lua``: a worker announcing to it meanwhile keeps
it); a candidate still named is marked as found named then, and kept. So a
tracker that torrents name keeps its backoff and counts however long the
queue takes to visit them, and one that nobody names is forgotten a period
after its last use. Each process tries at most once per ``PRUNE_EVERY``
seconds, and only one walk per ``PRUNE_EVERY`` runs in the namespace
(``tracker_walk.lua``).

Reading: ``tracker_report`` reads the busiest trackers (``Settings.top_trackers``)
(answers + failures + refusals, a ranking ``tracker_health.lua`` keeps with
every write) and ``tracker_others`` what all the other ones add up to (sums
kept with every write and prune): a few commands whatever the number of trackers,
never the whole hash.

Both per-process maps are bounded: the read cache is an ``Lru`` and the
batch is written out whenever it holds ``cache_size`` trackers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import gevent
import redis

from crawler import logs, redact, spawning
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.sources.lru import Lru
from crawler.sources.trackers import tracker_names
from crawler.store import scripts

log = logs.get(__name__)

ANSWER, REFUSAL, FAILURE, BLOCKED = "answer", "refusal", "failure", "blocked"
# How often one process prunes unused entries; pruning is idempotent.
PRUNE_EVERY = 600.0
# Candidates of one prune: each goes with every page of a walk of the torrents' tracker sets as a
# 16-byte digest (tracker_names.py), and once as its URL in the prune's step (at most 2 MiB of URLs
# of 4 KiB), so a few hundred; the rest wait for the next prune.
PRUNE_BATCH = 500
# The sums tracker_health.lua keeps, as status names them.
SUMS = (("answers", "answers"), ("failures", "failures"), ("refusals", "refusals"), ("cut", "peers_cut"))
# A learned cap not confirmed (a reply returning that many entries) for this
# long may be lowered by a smaller capped reply: a tracker's operator lowered
# it. A busy tracker confirms its cap with every big swarm; a day keeps a
# cap stable against the odd short reply.
CAP_CONFIRM_SECONDS = 86400.0
_EMPTY = {"answers": 0, "failures": 0, "refusals": 0, "streak": 0, "until": 0, "cut": 0}


@dataclass
class _UnwrittenHealth:
    """What one process noted of one tracker since its last write."""

    answers: int = 0
    refusals: int = 0
    last_refusal: str = ""
    blocked: int = 0  # asks the address policy refused
    last_blocked: str = ""
    cut: int = 0
    cap: int = 0  # the largest capped reply seen (0: none)
    most: int = 0  # the most entries any reply returned


class TrackerHealth:
    """One process's view of, and contributions to, the shared tracker health."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        base: float = 60.0,
        maximum: float = 6 * 3600.0,
        threshold: int = 2,
        refresh: float = 1.0,
        flush: float = 1.0,
        cache_size: int = 10_000,
        prune_after: float = 7 * 86400.0,
        cap_confirm: float = CAP_CONFIRM_SECONDS,
        named_always: tuple[str, ...] = (),
    ):
        self.client = client
        self.keys = keys
        self.base, self.maximum, self.threshold = base, maximum, threshold
        self.refresh, self.flush_every = refresh, flush
        self.cache_size, self.prune_after, self.cap_confirm = cache_size, prune_after, cap_confirm
        self._script = scripts.register(client, "tracker_health", package=__package__)
        self._prune = scripts.register(client, "tracker_prune", package=__package__)
        self._walk = scripts.register(client, "tracker_walk", package=__package__)
        # Trackers every torrent names without storing them (the configured defaults).
        self.named_always = frozenset(named_always)
        self.walk_every = PRUNE_EVERY
        self._state: Lru[str, tuple[dict, float]] = Lru(cache_size)  # url -> (state, read at monotonic)
        self._batch: dict[str, _UnwrittenHealth] = {}
        self._last_flush = time.monotonic()
        self._timer: gevent.Greenlet | None = None  # the batch's write, armed by its first record
        self._closed = False
        self._last_prune = float("-inf")
        self._indexed = False

    def _get(self, url: str) -> dict:
        now = time.monotonic()
        cached = self._state.get(url)
        if cached is not None and now - cached[1] < self.refresh:
            return cached[0]
        if cached is not None:
            # One greenlet reads it again; the others, asking while that read is
            # under way, go on with the state it replaces for one more refresh,
            # not each with its own HGET of the same field.
            self._state[url] = (cached[0], now)
        try:
            raw = self.client.hget(self.keys.tracker_health, url)
        except redis.RedisError as e:
            raise StoreError(f"reading tracker health: {e}") from e
        state = json.loads(raw) if raw else dict(_EMPTY)
        self._state[url] = (state, now)
        return state

    def backing_off_until(self, url: str) -> float | None:
        """Unix time until which ``url`` is skipped, or None if it may be asked now."""
        until = float(self._get(url).get("until", 0))
        return until if until > time.time() else None

    def no_scrape_until(self, url: str) -> float | None:
        """Unix time until which ``url`` is not scraped (learned: it cannot scrape), or None."""
        until = float(self._get(url).get("no_scrape_until", 0) or 0)
        return until if until > time.time() else None

    def learn_no_scrape(self, url: str, until: float) -> None:
        """Note at once, for every worker, that ``url`` cannot scrape: it is not scraped before ``until``.
        Raises ``StoreError``."""
        self._write(url, "none", 0, self._batch.pop(url, None), no_scrape=repr(until))

    def cap(self, url: str) -> int | None:
        """The learned cap of ``url`` (the most entries it returns per reply), or None if none was seen.

        This process's batch counts at once when it raises the cap (lowering is the script's call).
        """
        stored = self._get(url).get("cap")
        cap = int(stored) if stored else 0
        b = self._batch.get(url)
        if b is not None and (b.cap or cap):
            cap = max(cap, b.most) if cap else max(b.cap, b.most)
        return cap or None

    def record(self, url: str, outcome: str | bool, *, message: str = "", cut: int = 0,
               returned: int | None = None, capped: bool = False) -> None:
        """Note one announce of ``url``: ``ANSWER``, ``REFUSAL`` or ``FAILURE`` (each with its ``message``),
        or ``BLOCKED``: the address policy refused it (not the tracker's doing: no backoff).

        For an answer: ``cut`` peers dropped past the bound, ``returned``
        entries in the reply, ``capped`` whether the reply showed the tracker
        capping (fewer than asked while its counts said the swarm was larger).
        ``True``/``False`` stand for ``ANSWER``/``FAILURE``. Raises ``StoreError``.

        Once ``close`` has run nothing is recorded: a request that outlives its process's trackers
        (a scrape group still waiting on a tracker at a stop) must not write after the last flush.
        """
        if self._closed:
            return
        if outcome is True or outcome is False:
            outcome = ANSWER if outcome else FAILURE
        if outcome == FAILURE:
            self._write(url, "fail", 1, self._batch.pop(url, None), failure=redact.text(message, url)[:300])
            return
        # Read before the batch is taken: a read yields, and the batch's timer may write it meanwhile.
        state = self._get(url) if outcome != BLOCKED else _EMPTY
        b = self._batch.get(url)
        if b is None:
            b = self._batch[url] = _UnwrittenHealth()
            self._arm()
        if outcome == BLOCKED:
            b.blocked += 1
            b.last_blocked = redact.text(message, url)[:300]
            return
        if outcome == REFUSAL:
            b.refusals += 1
            b.last_refusal = redact.text(message, url)[:300]
        else:
            b.answers += 1
            b.cut += cut
            if returned is not None:
                b.most = max(b.most, returned)
                if capped:
                    b.cap = max(b.cap, returned)
        if state.get("streak", 0) or (capped and not state.get("cap")):
            self._write(url, "ok", 0, self._batch.pop(url))
        elif len(self._batch) >= self.cache_size or time.monotonic() - self._last_flush >= self.flush_every:
            self.flush()

    def _arm(self) -> None:
        """A batch holds something: write it within ``flush_every`` seconds even if nothing else is
        recorded meanwhile (a crawl of few torrents may record nothing again for a revisit interval)."""
        if self._timer is None and not self._closed:
            self._timer = spawning.spawn_later(self.flush_every, self._tick)

    def _tick(self) -> None:
        self._timer = None  # a record made from now on arms the next one
        try:
            self.flush()
        except StoreError as e:
            log.warning("tracker_health_not_written", error=str(e), note="kept and written again")
            self._arm()

    def close(self) -> None:
        """Write what is batched (a clean stop); no timer is armed afterwards. Raises ``StoreError``."""
        self._closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.kill(block=False)
        self.flush()

    def flush(self) -> None:
        """Write batched answers and refusals now (the worker calls this at shutdown); prune when due."""
        self._last_flush = time.monotonic()
        for url in list(self._batch):
            b = self._batch.pop(url, None)
            if b is not None:
                try:
                    self._write(url, "none", 0, b)
                except StoreError:
                    self._batch.setdefault(url, b)  # kept, to be written with the next flush
                    raise
        if self._last_flush - self._last_prune >= PRUNE_EVERY:
            self._last_prune = self._last_flush
            self.prune()

    def prune(self, now: float | None = None) -> int:
        """Remove the health of trackers unused for ``prune_after`` seconds that no torrent names;
        how many. Raises ``StoreError``.

        Candidates found named are marked as such (kept another ``prune_after``). Does nothing
        while another process's walk is less than ``walk_every`` seconds old. The first call of a
        process also indexes entries written before the last-used index existed (as used now:
        they get a whole ``prune_after``).
        """
        now = time.time() if now is None else now
        if not self._indexed:
            self._index_unindexed(now)
        cutoff = now - self.prune_after
        k = self.keys
        try:
            raw = self._walk(keys=[k.tracker_used, k.tracker_totals],
                             args=[repr(cutoff), repr(now), repr(self.walk_every), PRUNE_BATCH])
        except redis.RedisError as e:
            raise StoreError(f"pruning tracker health: {e}") from e
        candidates = [u.decode() if isinstance(u, bytes) else u for u in raw]
        if not candidates:
            return 0
        found = tracker_names.named(self.client, k, [u for u in candidates if u not in self.named_always])
        found |= self.named_always.intersection(candidates)
        named = [u for u in candidates if u in found]
        unnamed = [u for u in candidates if u not in found]
        try:
            return int(self._prune(keys=[k.tracker_health, k.tracker_used, k.tracker_rank, k.tracker_totals],
                                   args=[repr(cutoff), repr(now), len(named), *named, *unnamed]))
        except redis.RedisError as e:
            raise StoreError(f"pruning tracker health: {e}") from e

    def _index_unindexed(self, now: float) -> None:
        """ZADD NX every health entry into the last-used index, a page at a time (idempotent)."""
        try:
            page = []
            for url in self.client.hscan_iter(self.keys.tracker_health, count=1000):
                page.append(url[0] if isinstance(url, tuple) else url)
                if len(page) >= 1000:
                    self.client.zadd(self.keys.tracker_used, {u: now for u in page}, nx=True)
                    page = []
            if page:
                self.client.zadd(self.keys.tracker_used, {u: now for u in page}, nx=True)
        except redis.RedisError as e:
            raise StoreError(f"indexing tracker health: {e}") from e
        self._indexed = True

    def _write(self, url: str, outcome: str, failures: int, b: _UnwrittenHealth | None,
               no_scrape: str = "", failure: str = "") -> None:
        b = b or _UnwrittenHealth()
        try:
            raw = self._script(
                keys=[self.keys.tracker_health, self.keys.tracker_used, self.keys.tracker_rank,
                      self.keys.tracker_totals],
                args=[url, b.answers, failures, outcome, repr(time.time()), self.base, self.maximum,
                      self.threshold, b.refusals, b.last_refusal, b.cut, b.cap, b.most, self.cap_confirm,
                      no_scrape, failure, b.blocked, b.last_blocked],
            )
        except redis.RedisError as e:
            raise StoreError(f"recording tracker health: {e}") from e
        self._state[url] = (json.loads(raw), time.monotonic())
