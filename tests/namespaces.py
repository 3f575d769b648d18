"""Removing one namespace's keys from a shared Redis (tests and benchmarks)."""

from __future__ import annotations

import redis

from crawler.keys import Keys


def delete_namespace(client: redis.Redis, namespace: str, batch: int = 1000) -> None:
    """UNLINK every key of ``namespace`` (``{namespace}*``), ``batch`` keys per call."""
    names = []
    for key in client.scan_iter(match=Keys(namespace).match_all, count=batch):
        names.append(key)
        if len(names) >= batch:
            client.unlink(*names)
            names.clear()
    if names:
        client.unlink(*names)
