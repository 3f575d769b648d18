"""A worker's own figures for ``peercrawl status`` (contract §7): its health and its heartbeat.

``WorkerHealth`` keeps the worker's recent visits (rate, outage streak);
``Heartbeat`` publishes them every ``interval`` seconds through the worker
registry (``crawler.registry.worker_registry.WorkerRegistry``) with a TTL of ``3 × interval``,
so a process killed with SIGKILL drops out of ``status`` within the TTL.
A worker bound to its parent (a supervisor's child: ``workers.lifeline``)
notes that parent at start; ``orphaned()`` tells the worker, at each beat,
that the parent is gone and the worker must stop.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections import deque

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.registry.worker_registry import WorkerRegistry
from workers.lifeline import bound_parent

# How far back visits_per_hour looks: long enough to smooth bursts of claims,
# short enough that a slowed worker shows it within minutes.
RATE_WINDOW = 600.0


class WorkerHealth:
    """A worker's recent visits: its rate and whether its network looks down.

    ``failing`` turns on after ``failing_after`` visits in a row failed (no
    source answered) and off at the first answered visit. A visit that says
    nothing of the network (its sources refused by the address policy or by
    the trackers) is counted, and leaves the streak as it was.
    """

    def __init__(self, failing_after: int = 5):
        self.failing_after = failing_after
        self.visits = 0
        self.failed = 0
        self.streak = 0
        self.peers = 0
        self.started = time.time()
        self._recent: deque[float] = deque()

    def note(self, answered: bool, peers: int = 0, now: float | None = None, network: bool = True) -> bool:
        """Count one visit (``network`` False: one that says nothing of the network); returns True
        when this visit changed ``failing``."""
        now = time.time() if now is None else now
        before = self.failing
        self.visits += 1
        self.peers += peers
        self._recent.append(now)
        if not answered:
            self.failed += 1
        if network:
            self.streak = 0 if answered else self.streak + 1
        return before != self.failing

    @property
    def failing(self) -> bool:
        """Whether the last ``failing_after`` visits in a row all failed."""
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
        self.registry = WorkerRegistry(client, keys)
        self.interval = interval
        self.ttl = 3 * interval
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = worker_id or f"{self.host}:{self.pid}:{uuid.uuid4().hex[:6]}"
        self.started = time.time()
        self.parent = bound_parent()  # None: not bound to a parent, nothing to watch

    def orphaned(self) -> bool:
        """Whether this worker's parent changed since start: the supervisor it was bound to is gone."""
        return self.parent is not None and os.getppid() != self.parent

    def beat(self, figures: dict, now: float | None = None) -> None:
        """Write ``figures`` (JSON-able values) plus host, pid and started; raises ``StoreError``."""
        now = time.time() if now is None else now
        row = {"host": self.host, "pid": self.pid, "started": round(self.started, 3), **figures}
        self.registry.write(self.id, row, self.ttl, now)

    def leave(self) -> None:
        """Remove this worker from ``status`` (clean shutdown); errors are ignored (its entry expires)."""
        try:
            self.registry.leave(self.id)
        except StoreError:
            pass
