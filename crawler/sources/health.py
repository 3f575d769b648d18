"""Tracker health shared by every worker through Redis (SPEC §3).

Strategy: ``keys.tracker_health`` maps a tracker URL to JSON ``{answers,
failures, refusals, last_refusal, streak, until, cut, cap, used}``, updated
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
it replaces) and batches answers and refusals, writing them at most
once per ``flush`` seconds. Failures, the first answer after failures (the
recovery) and a newly learned cap are written at once so that other workers
learn them quickly.

Pruning: each write sets the tracker's last-used time (``keys.tracker_used``);
entries unused for ``prune_after`` seconds are removed with their index
(``tracker_prune.lua``), at most once per ``PRUNE_EVERY`` seconds per
process. A tracker that some torrent still names is announced at least once
per revisit interval or backoff, so only trackers no torrent uses any more
are forgotten (``Settings.tracker_prune_seconds`` is checked to exceed both).

Both per-process maps are bounded: the read cache is an ``Lru`` and the
batch is written out whenever it holds ``cache_size`` trackers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from crawler import lua
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.sources import redact
from crawler.sources.lru import Lru

ANSWER, REFUSAL, FAILURE = "answer", "refusal", "failure"
# How often one process prunes unused entries; pruning is idempotent.
PRUNE_EVERY = 600.0
# Entries removed per prune call: one bounded script run.
PRUNE_BATCH = 10_000
# A learned cap not confirmed (a reply returning that many entries) for this
# long may be lowered by a smaller capped reply: a tracker's operator lowered
# it. A busy tracker confirms its cap with every big swarm; a day keeps a
# cap stable against the odd short reply.
CAP_CONFIRM_SECONDS = 86400.0
_EMPTY = {"answers": 0, "failures": 0, "refusals": 0, "streak": 0, "until": 0, "cut": 0}


@dataclass
class _Batch:
    """What one process noted of one tracker since its last write."""

    answers: int = 0
    refusals: int = 0
    last_refusal: str = ""
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
    ):
        self.client = client
        self.keys = keys
        self.base, self.maximum, self.threshold = base, maximum, threshold
        self.refresh, self.flush_every = refresh, flush
        self.cache_size, self.prune_after, self.cap_confirm = cache_size, prune_after, cap_confirm
        self._script = lua.register(client, "tracker_health", package="crawler.sources")
        self._prune = lua.register(client, "tracker_prune", package="crawler.sources")
        self._state: Lru[str, tuple[dict, float]] = Lru(cache_size)  # url -> (state, read at monotonic)
        self._batch: dict[str, _Batch] = {}
        self._last_flush = time.monotonic()
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
        """Note one announce of ``url``: ``ANSWER``, ``REFUSAL`` (with its ``message``) or ``FAILURE``.

        For an answer: ``cut`` peers dropped past the bound, ``returned``
        entries in the reply, ``capped`` whether the reply showed the tracker
        capping (fewer than asked while its counts said the swarm was larger).
        ``True``/``False`` stand for ``ANSWER``/``FAILURE``. Raises ``StoreError``.
        """
        if outcome is True or outcome is False:
            outcome = ANSWER if outcome else FAILURE
        if outcome == FAILURE:
            self._write(url, "fail", 1, self._batch.pop(url, None))
            return
        b = self._batch.get(url)
        if b is None:
            b = self._batch[url] = _Batch()
        state = self._get(url)
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

    def flush(self) -> None:
        """Write batched answers and refusals now (the worker calls this at shutdown); prune when due."""
        self._last_flush = time.monotonic()
        for url in list(self._batch):
            b = self._batch.pop(url, None)
            if b is not None:
                self._write(url, "none", 0, b)
        if self._last_flush - self._last_prune >= PRUNE_EVERY:
            self._last_prune = self._last_flush
            self.prune()

    def prune(self, now: float | None = None) -> int:
        """Remove the health of trackers unused for ``prune_after`` seconds; how many. Raises ``StoreError``.

        The first call of a process also indexes entries written before the
        last-used index existed (as used now: they get a whole ``prune_after``).
        """
        now = time.time() if now is None else now
        if not self._indexed:
            self._index_unindexed(now)
        cutoff = now - self.prune_after
        try:
            return int(self._prune(keys=[self.keys.tracker_health, self.keys.tracker_used],
                                   args=[repr(cutoff), PRUNE_BATCH]))
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

    def _write(self, url: str, outcome: str, failures: int, b: _Batch | None) -> None:
        b = b or _Batch()
        try:
            raw = self._script(
                keys=[self.keys.tracker_health, self.keys.tracker_used],
                args=[url, b.answers, failures, outcome, repr(time.time()), self.base, self.maximum,
                      self.threshold, b.refusals, b.last_refusal, b.cut, b.cap, b.most, self.cap_confirm],
            )
        except redis.RedisError as e:
            raise StoreError(f"recording tracker health: {e}") from e
        self._state[url] = (json.loads(raw), time.monotonic())


def tracker_report(client: redis.Redis, keys: Keys) -> dict[str, dict]:
    """Every tracker's health for ``status --json``, keyed by the redacted URL.

    Per tracker: ``answers``, ``failures``, ``refusals``, ``last_refusal``
    (redacted message or None), ``backing_off``, ``until`` (unix time or
    None), ``peers_cut`` (peers dropped past the per-source bound),
    ``learned_cap`` (entries per reply the tracker was seen to cap at, or
    None) and ``last_used`` (unix time). Raises ``StoreError``.
    """
    try:
        rows = client.hgetall(keys.tracker_health)
    except redis.RedisError as e:
        raise StoreError(f"reading tracker health: {e}") from e
    now = time.time()
    out = {}
    for url, raw in rows.items():
        try:
            h = json.loads(raw)
        except ValueError:
            h = {}
        until = float(h.get("until", 0) or 0)
        cap = h.get("cap")
        out[redact.url(url.decode("utf-8", "replace"))] = {
            "answers": int(h.get("answers", 0)),
            "failures": int(h.get("failures", 0)),
            "refusals": int(h.get("refusals", 0)),
            "last_refusal": h.get("last_refusal") or None,
            "backing_off": until > now,
            "until": until if until > now else None,
            "peers_cut": int(h.get("cut", 0)),
            "learned_cap": int(cap) if cap else None,
            "last_used": h.get("used"),
        }
    return out
