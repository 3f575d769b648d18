"""Worker registration for ``peercrawl status`` (SPEC §7).

Each process writes its figures to ``keys.worker(id)`` (a HASH whose values
are JSON) and its heartbeat expiry to the ``keys.workers`` ZSET, every
``interval`` seconds with a TTL of ``3 × interval``. ``status`` lists the
entries whose expiry is in the future, so a process killed with SIGKILL drops
out within the TTL with nobody cleaning up after it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections import deque

import redis

from crawler.errors import StoreError
from crawler.keys import Keys

# How far back visits_per_hour looks: long enough to smooth bursts of claims,
# short enough that a slowed worker shows it within minutes.
RATE_WINDOW = 600.0


class Health:
    """A worker's recent visits: its rate and whether its network looks down.

    ``failing`` turns on after ``failing_after`` visits in a row failed (no
    source answered) and off at the first answered visit.
    """

    def __init__(self, failing_after: int = 5):
        self.failing_after = failing_after
        self.visits = 0
        self.failed = 0
        self.streak = 0
        self.peers = 0
        self.started = time.time()
        self._recent: deque[float] = deque()

    def note(self, answered: bool, peers: int = 0, now: float | None = None) -> bool:
        """Count one visit; returns True when this visit changed ``failing``."""
        now = time.time() if now is None else now
        before = self.failing
        self.visits += 1
        self.peers += peers
        self._recent.append(now)
        if answered:
            self.streak = 0
        else:
            self.failed += 1
            self.streak += 1
        return before != self.failing

    @property
    def failing(self) -> bool:
        return self.streak >= self.failing_after

    def per_hour(self, now: float | None = None) -> float:
        """Visits per hour over the last ``RATE_WINDOW`` seconds (or the uptime, if shorter)."""
        now = time.time() if now is None else now
        while self._recent and self._recent[0] < now - RATE_WINDOW:
            self._recent.popleft()
        span = min(RATE_WINDOW, max(now - self.started, 1.0))
        return len(self._recent) * 3600.0 / span


class Heartbeat:
    """Registers one worker process; ``beat(figures)`` refreshes it, ``leave()`` removes it."""

    def __init__(self, client: redis.Redis, keys: Keys, interval: float = 5.0, worker_id: str | None = None):
        self.client, self.keys = client, keys
        self.interval = interval
        self.ttl = 3 * interval
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = worker_id or f"{self.host}:{self.pid}:{uuid.uuid4().hex[:6]}"
        self.started = time.time()

    def beat(self, figures: dict, now: float | None = None) -> None:
        """Write ``figures`` (JSON-able values) plus host, pid and started; raises ``StoreError``."""
        now = time.time() if now is None else now
        row = {"host": self.host, "pid": self.pid, "started": round(self.started, 3), **figures}
        key = self.keys.worker(self.id)
        p = self.client.pipeline(transaction=True)
        p.hset(key, mapping={k: json.dumps(v) for k, v in row.items()})
        p.expire(key, int(self.ttl) + 1)
        p.zadd(self.keys.workers, {self.id: now + self.ttl})
        try:
            p.execute()
        except redis.RedisError as e:
            raise StoreError(f"worker heartbeat failed: {e}") from e

    def leave(self) -> None:
        """Remove this worker from ``status`` (clean shutdown); errors are ignored."""
        try:
            p = self.client.pipeline(transaction=True)
            p.zrem(self.keys.workers, self.id)
            p.delete(self.keys.worker(self.id))
            p.execute()
        except redis.RedisError:
            pass
