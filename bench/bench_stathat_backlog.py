"""Benchmark: how long a StatHat backlog holds Redis while it is flushed.

After an outage of StatHat (or with the ``torrents`` family on a large
crawl) the outbox holds up to a million stats. A flush takes it, posts it
in chunks of 500 and settles each; a failed post leaves it for the next
flush. Every command Redis runs meanwhile makes every worker wait, so the
figure that matters is the longest single command, read from SLOWLOG
(commands over 1 ms), beside the flush's own Redis CPU and wall time, and
the flushing process's peak of Python memory (tracemalloc: the worker's
dyno holds it).

Two phases on ``--stats`` owed stats in one shard:

- ``failed_flush``: StatHat is down (nothing listens at its address): the
  claim, the read of the batch and what the failed post does with the rest;
- ``drain``: flushes against StatHat's EZ API on loopback
  (``tests/stathat_sink.py``, in its own process: what it keeps of the
  posts is not the flusher's memory) until nothing is owed.

Usage: python bench/bench_stathat_backlog.py [--quick] [--stats N] [--redis-url URL]
Prints JSON. The figures are absolute milliseconds of one Redis: compare
commits in one session (``bench/compare.py``), never across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from redis_cpu import redis_cpu  # noqa: E402  (bench/, the script's own directory)

from crawler import logs  # noqa: E402
from crawler.keys import Keys  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.stathat import Flusher  # noqa: E402
from tests.namespaces import delete_namespace  # noqa: E402
from tests.stathat_sink import StatHatSinkProcess  # noqa: E402


def phase(client, run) -> dict:
    """Run ``run()``; the longest Redis command meanwhile (SLOWLOG, over 1 ms), Redis CPU and wall."""
    client.slowlog_reset()
    tracemalloc.start()
    cpu, wall = redis_cpu(client), time.perf_counter()
    result = run()
    wall, cpu = time.perf_counter() - wall, 1000 * (redis_cpu(client) - cpu)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    slow = client.slowlog_get(1024)
    longest = max(slow, key=lambda e: e["duration"], default=None)
    return {
        "longest_redis_command_ms": round(longest["duration"] / 1000, 1) if longest else 0.0,
        "longest_redis_command": (longest["command"][:40].decode("utf-8", "replace") if longest else None),
        "redis_commands_over_1ms": len(slow),
        "redis_cpu_ms": round(cpu, 1),
        "seconds": round(wall, 2),
        "python_peak_mb": round(peak / 2**20, 1),
        **result,
    }


def main() -> None:
    """Fill an outbox, fail a flush, drain it; print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="200,000 stats (default 1,000,000)")
    ap.add_argument("--stats", type=int)
    ap.add_argument("--redis-url", default=os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    a = ap.parse_args()
    n = a.stats or (200_000 if a.quick else 1_000_000)
    logs.configure("warning", "json")
    client = redis.Redis.from_url(a.redis_url)
    ns = f"bench-backlog-{uuid.uuid4().hex[:8]}"
    keys = Keys(ns)
    saved = client.config_get("slowlog-*")
    client.config_set("slowlog-log-slower-than", 1000)
    client.config_set("slowlog-max-len", 1024)
    out: dict = {"stats": n}
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(0, n, 10_000):
            pipe.hset(keys.outbox, mapping={f"countries.C{j}.users": 1 + j % 7 for j in range(i, min(n, i + 10_000))})
        pipe.execute()
        owed = sum(1 + j % 7 for j in range(n))
        down = socket.socket()  # bound, never listening: StatHat refuses the connection
        down.bind(("127.0.0.1", 0))
        sink = StatHatSinkProcess()
        try:
            def flusher(url: str) -> Flusher:
                settings = Settings(redis_url=a.redis_url, namespace=ns, trackers=(), dht=False,
                                    secret="bench-secret-0123456789", stathat_ezkey="k", stathat_url=url,
                                    stathat_families=("countries",))
                return Flusher(client, keys, settings, budget_seconds=600)
            failing = flusher(f"http://127.0.0.1:{down.getsockname()[1]}/ez")
            out["failed_flush"] = phase(client, lambda: {"ok": failing.flush_once()["ok"]})
            fl = flusher(sink.url)

            def drain() -> dict:
                flushes, posts = 0, 0
                while client.exists(keys.outbox, keys.outbox_in_flight) and flushes < 20:
                    posts += fl.flush_once()["requests"]
                    flushes += 1
                return {"flushes": flushes, "posts": posts}
            out["drain"] = phase(client, drain)
        finally:
            down.close()
            got = sink.close()
        out["increments_owed"], out["increments_posted"] = owed, got
        out["exact"] = got == owed
    finally:
        for k, v in saved.items():
            client.config_set(k, v)
        delete_namespace(client, ns)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
