"""How close a sharded queue's claims stay to the global best score, printing JSON.

Several claimers (each a ``Queue`` of its own, as worker processes are, with
its own estimates of the shards: ``crawler/queue/shard_tops.py``) run claim +
complete cycles on many greenlets against one private redis-server. The
torrents carry varied scores and come back due soon after each visit, so
the queue keeps changing under the claimers. After every claim the
benchmark counts the ready torrents, in every shard, with a higher score
than the one claimed: the better torrents that claim passed over at that
instant. With one shard that number is only the race between greenlets
claiming at once, so the one-shard run is the baseline of the same run.

    python bench/bench_shard_claims.py            # 50,000 torrents, 1/4/16/64 shards
    python bench/bench_shard_claims.py --quick    # 10,000 torrents, 1/4/16 shards
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_queue import private_redis  # noqa: E402 - the same private server as the queue bench

from crawler.keys import Keys  # noqa: E402
from crawler.queue.queue import Queue  # noqa: E402
from crawler.queue.scoring import Outcome  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.torrents.items import NewItem  # noqa: E402


def fill(c: redis.Redis, keys: Keys, settings: Settings, n: int) -> None:
    """``n`` torrents with three different scores, all ready."""
    q = Queue(c, keys, settings)
    q.add([NewItem(f"{random.getrandbits(160):040x}") for _ in range(n)], now=1.0)
    rng = random.Random(1)
    while leases := q.claim(2000, now=1.0):
        for lease in leases:
            outcome = rng.choice([Outcome.NONE, Outcome.SOME, Outcome.FULL])
            q.complete(lease, outcome, now=1.0, due=2.0)
    while any(c.zcard(k.cooling) for k in keys.all_shards):
        q.housekeep(now=2.0)


def passed_over(c: redis.Redis, keys: Keys, score: float) -> tuple[int, int]:
    """Ready torrents (all shards) scoring above ``score``, and all ready torrents."""
    p = c.pipeline(transaction=False)
    for k in keys.all_shards:
        p.zcount(k.ready, f"({score!r}", "+inf")
        p.zcard(k.ready)
    got = p.execute()
    return sum(got[0::2]), sum(got[1::2])


def cycles(url: str, keys: Keys, settings: Settings, claimers: int, greenlets: int, seconds: float,
           measure: bool) -> tuple[int, float, list[int], list[float]]:
    """Claim + complete on ``claimers`` queues of ``greenlets`` each for ``seconds``; with
    ``measure``, what each claim passed over (an extra read per claim, so not timed)."""
    c = redis.Redis.from_url(url)
    queues = [Queue(redis.Redis.from_url(url), keys, settings) for _ in range(claimers)]
    rng = random.Random(2)
    over, fractions, claims = [], [], [0]
    end = time.time() + seconds

    def loop(q: Queue) -> None:
        while time.time() < end:
            leases = q.claim(1)
            if not leases:
                gevent.sleep(0.01)
                continue
            (lease,) = leases
            if measure:
                better, ready = passed_over(c, keys, lease.score)
                over.append(better)
                fractions.append(better / max(1, ready))
            claims[0] += 1
            q.complete(lease, rng.choice([Outcome.NONE, Outcome.SOME, Outcome.FULL]),
                       due=time.time() + rng.uniform(0.2, 2.0))

    t = time.perf_counter()
    gevent.joinall([gevent.spawn(loop, q) for q in queues for _ in range(greenlets)])
    return claims[0], time.perf_counter() - t, sorted(over), sorted(fractions)


def run(url: str, shards: int, n: int, claimers: int, greenlets: int, seconds: float) -> dict:
    """One shard count: claims/s unmeasured, then what the claims passed over."""
    c = redis.Redis.from_url(url)
    c.flushall()
    settings = Settings(namespace="bq", redis_url=url, secret="x" * 16, lease_seconds=600)
    keys = Keys("bq", shards)
    fill(c, keys, settings, n)
    claims, elapsed, _, _ = cycles(url, keys, settings, claimers, greenlets, seconds, measure=False)
    _, _, over, fractions = cycles(url, keys, settings, claimers, greenlets, seconds, measure=True)
    return {
        "shards": shards,
        "claims": claims,
        "claims_per_s": round(claims / elapsed, 1),
        "passed_over_mean": round(statistics.fmean(over), 2) if over else None,
        "passed_over_p95": over[int(0.95 * (len(over) - 1))] if over else None,
        "passed_over_max": over[-1] if over else None,
        "passed_over_fraction_p95": round(fractions[int(0.95 * (len(fractions) - 1))], 5) if fractions else None,
    }


def main() -> None:
    """Run every shard count on the same torrents and print the figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    n = 10_000 if a.quick else 50_000
    counts = (1, 4, 16) if a.quick else (1, 4, 16, 64)
    seconds = 4.0 if a.quick else 10.0
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = private_redis(tmp)
        try:
            rows = [run(url, s, n, claimers=3, greenlets=8, seconds=seconds) for s in counts]
        finally:
            proc.terminate()
            proc.wait()
    base = rows[0]
    for r in rows[1:]:
        r["claims_per_s_vs_1_shard"] = round(r["claims_per_s"] / base["claims_per_s"], 3)
        r["passed_over_mean_minus_1_shard"] = round(r["passed_over_mean"] - base["passed_over_mean"], 2)
    print(json.dumps({"torrents": n, "claimers": 3, "greenlets_each": 8, "seconds_each": seconds,
                      "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
