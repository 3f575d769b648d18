"""Benchmark: what a claiming process costs Redis at rest, by the number of queue shards.

A process claiming from a sharded queue keeps an estimate of what each shard
offers next and refreshes the stale ones with a peek: ``claim.lua`` claiming
nothing, every stale shard in one round trip, at most once a second
(``crawler/queue/shard_tops.py``). That is background load, paid whether or not
anything is claimed, and it grows with the shards: this measures it for one
process claiming 8 torrents every 50 ms from an empty queue (a worker with
nothing to do) at 1, 16, 256 and 1,024 shards (the most a namespace may have).

Usage: python bench/bench_shard_peeks.py [--seconds S] [--redis-url URL]
Prints JSON: per shard count, Redis CPU and the process's CPU per second of
claiming, script calls per second, and each figure over the one-shard run's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from redis_cpu import redis_cpu  # noqa: E402  (bench/, the script's own directory)

from crawler.keys import Keys  # noqa: E402
from crawler.queue.queue import Queue  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from tests.namespaces import delete_namespace  # noqa: E402

SHARDS = (1, 16, 256, 1024)


def redis_figures(client) -> tuple[float, int]:
    """Redis's CPU so far (ms) and its EVALSHA calls so far."""
    calls = client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    return 1000 * redis_cpu(client), int(calls)


def run(client, url: str, shards: int, seconds: float) -> dict:
    """One process claiming from an empty queue of ``shards`` shards for ``seconds``."""
    ns = f"bench-peeks-{uuid.uuid4().hex[:8]}"
    settings = Settings(redis_url=url, namespace=ns, trackers=(), dht=False, secret="bench-secret-0123456789")
    queue = Queue(client, Keys(ns, shards), settings)
    try:
        queue.claim(8)  # the first peek reads every estimate it may
        (cpu0, calls0), py0, t0 = redis_figures(client), time.process_time(), time.monotonic()
        claims = 0
        while time.monotonic() - t0 < seconds:
            queue.claim(8)
            claims += 1
            time.sleep(0.05)
        (cpu1, calls1), py1, t1 = redis_figures(client), time.process_time(), time.monotonic()
    finally:
        delete_namespace(client, ns)
    span = t1 - t0
    return {"claims_per_s": round(claims / span, 1), "redis_cpu_ms_per_s": round((cpu1 - cpu0) / span, 2),
            "process_cpu_ms_per_s": round(1000 * (py1 - py0) / span, 2),
            "script_calls_per_s": round((calls1 - calls0) / span, 1)}


def main() -> None:
    """Measure each shard count; print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="claiming time per shard count (default 5)")
    ap.add_argument("--redis-url", default=os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    a = ap.parse_args()
    client = redis.Redis.from_url(a.redis_url)
    out: dict = {"seconds": a.seconds, "by_shards": {}}
    for n in SHARDS:
        out["by_shards"][str(n)] = run(client, a.redis_url, n, a.seconds)
    base = out["by_shards"]["1"]
    for row in out["by_shards"].values():
        row["redis_cpu_vs_one_shard"] = round(row["redis_cpu_ms_per_s"] / max(base["redis_cpu_ms_per_s"], 1e-9), 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
