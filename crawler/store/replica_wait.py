"""``Wait``: replicas that must acknowledge a batch of script calls (Redis ``WAIT``)."""

from __future__ import annotations

import time

from crawler import logs

log = logs.get("redis")


class Wait:
    """Replicas that must acknowledge the writes of a ``run_pipelined`` batch (Redis ``WAIT``).

    Replication is asynchronous: a master acknowledges a script before any
    replica has it, and a failover promotes a replica that may not. With a
    ``Wait``, each batch ends with ``WAIT replicas timeout_ms`` on the same
    connection as its scripts (WAIT covers the writes of its own
    connection), so it returns once ``replicas`` replicas have every write of
    the batch, or after ``timeout_ms``. A batch acknowledged by fewer is not
    undone (the master keeps it): it counts in ``short`` and is logged at
    most once a minute, and the crawl goes on. Build it with
    ``from_settings`` (None when ``PEERCRAWL_WAIT_REPLICAS`` is 0).
    """

    LOG_EVERY = 60.0

    def __init__(self, replicas: int, timeout_ms: int):
        self.replicas, self.timeout_ms = replicas, timeout_ms
        self.batches = 0  # batches that sent a WAIT
        self.short = 0  # of them, acknowledged by fewer than ``replicas`` (or not waited for)
        self._logged = float("-inf")

    @classmethod
    def from_settings(cls, settings) -> "Wait | None":
        """``PEERCRAWL_WAIT_REPLICAS`` and ``PEERCRAWL_WAIT_TIMEOUT_MS``; None when off."""
        return cls(settings.wait_replicas, settings.wait_timeout_ms) if settings.wait_replicas else None

    def note(self, acked, node: str = "redis") -> None:
        """Count one batch's WAIT reply (the replicas that acknowledged, or the error it got)."""
        self.batches += 1
        if isinstance(acked, int) and acked >= self.replicas:
            return
        self.short += 1
        now = time.monotonic()
        if now - self._logged >= self.LOG_EVERY:
            self._logged = now
            log.warning("replicas_behind", node=node, wanted=self.replicas, acknowledged=str(acked),
                        short=self.short, batches=self.batches,
                        note="recordings not yet on enough replicas are kept; a failover now could lose them")
