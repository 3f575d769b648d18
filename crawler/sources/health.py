"""Tracker health shared by every worker through Redis (SPEC §3).

Strategy: ``keys.tracker_health`` maps a tracker URL to JSON ``{answers,
failures, streak, until}``, updated only by ``tracker_health.lua``. After
``threshold`` consecutive failures a tracker backs off for ``base`` seconds,
doubling with each further failure up to ``max``; one answer resets it. A
backing-off tracker is skipped by every worker without network traffic.

A busy worker announces thousands of times a second, so Redis is not asked
per announce: each process reads a tracker's state at most once per
``refresh`` seconds and batches successes, writing them at most once per
``flush`` seconds. Failures, and the first answer after failures (the
recovery), are written at once so that other workers learn them quickly.

A tracker that answered with an error ("torrent not registered") is alive:
that counts as an answer here although the source failed for that torrent.
"""

from __future__ import annotations

import json
import time

import redis

from crawler import lua
from crawler.errors import StoreError
from crawler.keys import Keys


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
    ):
        self.client = client
        self.keys = keys
        self.base, self.maximum, self.threshold = base, maximum, threshold
        self.refresh, self.flush_every = refresh, flush
        self._script = lua.register(client, "tracker_health", package="crawler.sources")
        self._state: dict[str, tuple[dict, float]] = {}  # url -> (state, read at monotonic)
        self._answers: dict[str, int] = {}
        self._last_flush = time.monotonic()

    def _get(self, url: str) -> dict:
        now = time.monotonic()
        cached = self._state.get(url)
        if cached is not None and now - cached[1] < self.refresh:
            return cached[0]
        try:
            raw = self.client.hget(self.keys.tracker_health, url)
        except redis.RedisError as e:
            raise StoreError(f"reading tracker health: {e}") from e
        state = json.loads(raw) if raw else {"answers": 0, "failures": 0, "streak": 0, "until": 0}
        self._state[url] = (state, now)
        return state

    def backing_off_until(self, url: str) -> float | None:
        """Unix time until which ``url`` is skipped, or None if it may be asked now."""
        until = float(self._get(url).get("until", 0))
        return until if until > time.time() else None

    def record(self, url: str, answered: bool) -> None:
        """Note one answer or failure of ``url``. Raises ``StoreError`` if Redis fails."""
        if answered:
            self._answers[url] = self._answers.get(url, 0) + 1
            if self._get(url).get("streak", 0):
                self._write(url, "ok", 0)
            elif time.monotonic() - self._last_flush >= self.flush_every:
                self.flush()
        else:
            self._write(url, "fail", 1)

    def flush(self) -> None:
        """Write batched answers now (the worker calls this at shutdown)."""
        self._last_flush = time.monotonic()
        for url in list(self._answers):
            self._write(url, "none", 0)

    def _write(self, url: str, outcome: str, failures: int) -> None:
        answers = self._answers.pop(url, 0)
        try:
            raw = self._script(
                keys=[self.keys.tracker_health],
                args=[url, answers, failures, outcome, time.time(), self.base, self.maximum, self.threshold],
            )
        except redis.RedisError as e:
            raise StoreError(f"recording tracker health: {e}") from e
        self._state[url] = (json.loads(raw), time.monotonic())


def tracker_report(client: redis.Redis, keys: Keys) -> dict[str, dict]:
    """Every tracker's health for ``status --json``: url -> {answers, failures, backing_off, until}.

    ``until`` is a unix time or None. Raises ``StoreError``.
    """
    try:
        rows = client.hgetall(keys.tracker_health)
    except redis.RedisError as e:
        raise StoreError(f"reading tracker health: {e}") from e
    now = time.time()
    out = {}
    for url, raw in rows.items():
        h = json.loads(raw)
        until = float(h.get("until", 0))
        out[url.decode()] = {
            "answers": int(h.get("answers", 0)),
            "failures": int(h.get("failures", 0)),
            "backing_off": until > now,
            "until": until if until > now else None,
        }
    return out
