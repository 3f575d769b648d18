"""Benchmark: ``stats ... --limit 20`` over a million names spread across counter shards.

With several shards (contract §9) a torrent's counters live whole in its shard,
while a place counter is the sum of its shards' parts (each IP counts in the
shard of its fingerprint). Measured on the same data, against the baseline
of the same ranking read from one shard (one ZSET) in the same run:

- ``torrents``: ``stats torrents`` with a million torrents, each in its
  shard: the shards' first 20 merged (exact: the shards hold disjoint names),
  at ``--shards`` and at 1,024 shards (the most a namespace may have).
- for a place index with a million names whose counts are spread over the
  shards (``stats postcodes --country Germany``), three ways to rank the sums:
  - ``totals``: what peercrawl does (``crawler/counters/rollup.py``): the
    sums kept in totals, each place index whole in one shard, settled before
    the read; a read is one ZREVRANGE. Also measured: the settle that builds
    the totals from the rollup outboxes (increments per second), and the read
    at 1,024 shards.
  - ``threshold``: a read-time threshold-algorithm merge over the shards'
    parts (sorted access by pages of ZREVRANGE, random access by ZMSCORE on
    every shard, stop when the k-th sum beats the sum of the shards' last
    seen counts). Exact; fast when counts are skewed, a full scan when they
    are flat. Stopped at ``--ta-budget`` seconds (reported as not finished).
  - ``naive``: each shard's first 20, summed and merged: fast and wrong; its
    exactness is reported.

And what sharding costs the recording: visits of 200 new (then seen)
peers per second with 16 and 1,024 shards against one shard, in interleaved
rounds (``recording``; the place calls in the IPs' shards and the rollup).

Two distributions of ``--names`` names: ``skewed`` (Zipf-like counts, each
place name in 1-4 shards) and ``flat`` (every name counted once, in one
shard: the worst case of any read-time merge).

Usage: python bench/bench_stats_shards.py [--quick] [--names N] [--shards S] [--redis-url URL]
Prints JSON: seconds per read (median of ``--reads``) and ratios to the baseline.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_counters import NOW, make_visits  # noqa: E402

from crawler.counters import Recorder, top  # noqa: E402
from crawler.counters.rollup import Rollup, outbox_field  # noqa: E402
from crawler.keys import Keys, shard_of, total_shard  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from tests.namespaces import delete_namespace  # noqa: E402

LIMIT = 20
SCOPE = ("postcodes", "c", "Germany")  # the place index of the sums
PIPE = 10_000  # commands per pipeline while loading


def names_and_parts(rng: random.Random, n: int, shards: int, flat: bool) -> tuple[list, Counter]:
    """``[(name, shard, count)]`` parts and the true sums, for ``n`` names."""
    parts, sums = [], Counter()
    for i in range(n):
        h = f"{rng.getrandbits(160):040x}"
        for s in ([rng.randrange(shards)] if flat else rng.sample(range(shards), rng.randint(1, min(4, shards)))):
            c = 1 if flat else max(1, int(1_000_000 / (i + 1) ** 1.1 * rng.random()))
            parts.append((h, s, c))
            sums[h] += c
    return parts, sums


def load(client: redis.Redis, parts: list, sums: Counter, one: Keys, many: Keys) -> None:
    """The baseline ZSETs of sums; per shard its parts (the read-time merges' input), its rollup
    outbox as places.lua leaves it, and its torrents (a name's whole count in its shard)."""
    items = list(sums.items())
    for i in range(0, len(items), PIPE):
        client.zadd(one.index("all", SCOPE), dict(items[i : i + PIPE]))
        client.zadd(one.index("all", ("torrents",)), dict(items[i : i + PIPE]))
    load_torrents(client, sums, many)
    for i in range(0, len(parts), PIPE):
        pipe = client.pipeline(transaction=False)
        for h, s, c in parts[i : i + PIPE]:
            shard = many.shard(s)
            pipe.zincrby(shard.index("all", SCOPE), c, h)
            pipe.hincrby(shard.rollup_outbox, outbox_field("2024-05", SCOPE, h), c)
        pipe.execute()


def load_torrents(client: redis.Redis, sums: Counter, keys: Keys) -> None:
    """Each name's sum as a torrent's count, in its torrent's shard."""
    by: dict = {}
    for h, c in sums.items():
        by.setdefault(shard_of(h, keys.shards), {})[h] = c
    for s, members in by.items():
        items = list(members.items())
        for i in range(0, len(items), PIPE):
            client.zadd(keys.shard(s).index("all", ("torrents",)), dict(items[i : i + PIPE]))


def load_totals(client: redis.Redis, sums: Counter, keys: Keys) -> None:
    """Totals as settled, written directly (the 1,024-shard read), and the torrents."""
    key = keys.shard(total_shard(SCOPE, keys.shards)).total("all", SCOPE)
    items = list(sums.items())
    for i in range(0, len(items), PIPE):
        client.zadd(key, dict(items[i : i + PIPE]))
    load_torrents(client, sums, keys)


def timed(fn, reads: int) -> tuple[float, object]:
    """Median seconds of ``reads`` calls of ``fn`` and its last answer."""
    times, got = [], None
    for _ in range(reads):
        t = time.perf_counter()
        got = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), got


def naive(client: redis.Redis, keys: Keys) -> list:
    """Each shard's first ``LIMIT`` parts, summed and ranked: not exact."""
    pipe = client.pipeline(transaction=False)
    for s in keys.all_shards:
        pipe.zrevrange(s.index("all", SCOPE), 0, LIMIT - 1, withscores=True)
    sums = Counter()
    for got in pipe.execute():
        for m, c in got:
            sums[m.decode()] += int(c)
    return sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:LIMIT]


def threshold(client: redis.Redis, keys: Keys, budget: float, page: int = 2000) -> tuple[list | None, int]:
    """The threshold-algorithm merge over the shards' parts: (first ``LIMIT`` or None if out of
    time, parts read)."""
    ks = [s.index("all", SCOPE) for s in keys.all_shards]
    seen: dict[str, int] = {}
    last = [float("inf")] * len(ks)
    depth, read, end = 0, 0, time.perf_counter() + budget
    while True:
        pipe = client.pipeline(transaction=False)
        active = [i for i, v in enumerate(last) if v > 0]
        for i in active:
            pipe.zrevrange(ks[i], depth, depth + page - 1, withscores=True)
        new = set()
        for i, got in zip(active, pipe.execute()):
            read += len(got)
            last[i] = got[-1][1] if len(got) == page else 0
            new.update(m.decode() for m, _ in got if m.decode() not in seen)
        if new:
            names = sorted(new)
            pipe = client.pipeline(transaction=False)
            for k in ks:
                pipe.zmscore(k, names)
            totals = [0] * len(names)
            for got in pipe.execute():
                for j, c in enumerate(got):
                    if c is not None:
                        totals[j] += int(c)
            read += len(names) * len(ks)
            seen.update(zip(names, totals))
        depth += page
        best = heapq.nsmallest(LIMIT, seen.items(), key=lambda kv: (-kv[1], kv[0]))
        bound = sum(v for v in last if v > 0)
        if not any(v > 0 for v in last) or (len(best) == LIMIT and best[-1][1] > bound):
            return best, read
        if time.perf_counter() > end:
            return None, read


def run(client: redis.Redis, n: int, shards: int, flat: bool, reads: int, ta_budget: float, rng) -> dict:
    """One distribution: load, settle, read every way; figures."""
    one, many, wide = (Keys("bench-" + uuid.uuid4().hex[:10], k) for k in (1, shards, 1024))
    try:
        parts, sums = names_and_parts(rng, n, shards, flat)
        truth = sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:LIMIT]
        load(client, parts, sums, one, many)
        load_totals(client, sums, wide)
        n_parts, total = len(parts), sum(sums.values())
        # Millions of live tuples make each full collection of Python's GC take
        # ~100 ms, which a `stats` process (holding none) never pays.
        del parts, sums
        gc.collect()
        gc.freeze()
        t = time.perf_counter()
        added = Rollup(client, many).settle()
        settle_s = time.perf_counter() - t

        def rows(keys):
            return [(r["metric"].split(".")[3], r["count"])
                    for r in top(client, keys, "postcodes", country="Germany", limit=LIMIT)]

        def torrents(keys):
            return [(r["metric"].split(".")[1], r["count"]) for r in top(client, keys, "torrents", limit=LIMIT)]

        tbase_s, tbase = timed(lambda: torrents(one), reads)
        tmany_s, tmany = timed(lambda: torrents(many), reads)
        twide_s, twide = timed(lambda: torrents(wide), reads)
        base_s, base = timed(lambda: rows(one), reads)
        tot_s, tot = timed(lambda: rows(many), reads)
        wide_s, wide_rows = timed(lambda: rows(wide), reads)
        naive_s, nv = timed(lambda: naive(client, many), reads)
        t = time.perf_counter()
        ta, ta_read = threshold(client, many, ta_budget)
        ta_s = time.perf_counter() - t
        return {
            "names": n, "parts": n_parts, "shards": shards,
            "torrents_baseline_one_shard_s": round(tbase_s, 5),
            "torrents_s": round(tmany_s, 5), "torrents_x_baseline": round(tmany_s / tbase_s, 2),
            "torrents_1024_shards_s": round(twide_s, 5), "torrents_1024_x_baseline": round(twide_s / tbase_s, 2),
            "torrents_exact": tbase == truth and tmany == truth and twide == truth,
            "baseline_one_shard_s": round(base_s, 5),
            "totals_s": round(tot_s, 5), "totals_x_baseline": round(tot_s / base_s, 2),
            "totals_exact": tot == truth and base == truth,
            "totals_1024_shards_s": round(wide_s, 5), "totals_1024_x_baseline": round(wide_s / base_s, 2),
            "totals_1024_exact": wide_rows == truth,
            "settle_s": round(settle_s, 2), "settle_parts_per_s": round(n_parts / settle_s),
            "settle_added": added == total,
            "threshold_s": round(ta_s, 3), "threshold_x_baseline": round(ta_s / base_s, 1),
            "threshold_finished": ta is not None, "threshold_exact": ta == truth if ta is not None else None,
            "threshold_parts_read": ta_read,
            "naive_s": round(naive_s, 5), "naive_exact": nv == truth,
        }
    finally:
        gc.unfreeze()
        for k in (one, many, wide):
            delete_namespace(client, k.namespace)


def recording(client: redis.Redis, url: str, rounds: int, per_round: int, rng) -> dict:
    """Visits per second recorded into 1, 16 and 1,024 shards, interleaved rounds, medians."""
    layouts = {n: Keys("bench-" + uuid.uuid4().hex[:10], n) for n in (1, 16, 1024)}
    rows: dict = {n: {"all_new": [], "all_seen": []} for n in layouts}
    try:
        recs = {n: Recorder(client, k, Settings(redis_url=url, namespace=k.namespace, secret="bench-secret-0123456789",
                                                stathat_ezkey="bench"), locator=object(),
                            mark_buckets=max(64, rounds * per_round * 200 * 6 // 100))
                for n, k in layouts.items()}
        for r in range(rounds):
            group = make_visits(rng, per_round, 0x0B000000 + r * 100_000)
            for label in ("all_new", "all_seen"):
                for n, rec in recs.items():
                    t = time.perf_counter()
                    for h, peers in group:
                        rec.record_places_many([(h, peers)], NOW)
                    rows[n][label].append(len(group) / (time.perf_counter() - t))
    finally:
        for k in layouts.values():
            delete_namespace(client, k.namespace)
    out = {}
    for label in ("all_new", "all_seen"):
        base = rows[1][label]
        out[label] = {f"shards_{n}_visits_per_s": round(statistics.median(rows[n][label]), 1) for n in layouts}
        for n in (16, 1024):
            out[label][f"shards_{n}_x_one"] = round(statistics.median(
                [a / b for a, b in zip(rows[n][label], base)]), 3)
    return out


def main() -> None:
    """Run both distributions and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="50,000 names, 3 reads")
    ap.add_argument("--names", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--reads", type=int, default=7)
    ap.add_argument("--ta-budget", type=float, default=30.0, help="seconds the threshold merge may take")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    a = ap.parse_args()
    n, reads = (50_000, 3) if a.quick else (a.names, a.reads)
    client = redis.Redis.from_url(a.redis_url)
    rng = random.Random(42)
    out = {"limit": LIMIT, "redis_version": client.info("server")["redis_version"]}
    out["recording"] = recording(client, a.redis_url, 3 if a.quick else 7, 4, rng)
    for label, flat in (("skewed", False), ("flat", True)):
        out[label] = run(client, n, a.shards, flat, reads, a.ta_budget, rng)
    out["targets"] = {
        "exact": all(out[d]["totals_exact"] and out[d]["totals_1024_exact"] and out[d]["torrents_exact"]
                     for d in ("skewed", "flat")),
        "under_0.25s": all(max(out[d]["totals_s"], out[d]["totals_1024_shards_s"], out[d]["torrents_s"],
                               out[d]["torrents_1024_shards_s"]) < 0.25 for d in ("skewed", "flat")),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
