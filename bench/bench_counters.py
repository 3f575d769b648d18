"""Benchmark: recording visits into the unique-IP counters, this design vs the seed's.

The seed (000) does, per metric per IP: GET <metric>.<ip>; if missing, SETEX
<metric>.<ip> 30d <time>; INCR <metric>.<YYYY-MM>; INCR <metric>. It is run
here on the same Redis, in the same process, on the same visits (200 peers
each, places already resolved, so geolocation is out of the comparison):

- seed_rtt: one command per round trip;
- seed_pipelined: the same commands pipelined (all GETs, then the writes);
- ours: ``Recorder.record_places_many``, one visit a call (a read-only
  probe of each IP's group record, one round trip; then one Lua call per
  batch of ~800 pairs for the IPs that might count, a visit's batches
  pipelined in one round trip).

Each runs "all new" visits (fresh IPs) and "all seen" visits (the same visits
again), in interleaved rounds (ours, pipelined, one-per-round-trip on the
same moment of a shared machine); ratios are per round, reported as medians. Memory: bytes per dedupe mark, as the sum of MEMORY USAGE over every
mark bucket of ours and over sampled seed keys (which leaves out the seed's
per-key expiry entry, flattering the seed), plus INFO used_memory deltas
(noisy on a shared Redis). The mark buckets are sized as production should
size them (marks / 100, see crawler/counters/marks.py).

Usage: python bench/bench_counters.py [--quick] [--redis-url URL]
Prints JSON with the ratios and whether the targets (≥4× pipelined, ≥50×
one-per-round-trip, ≤1/10 bytes per mark) are met.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crawler.counters import Recorder, metrics_for, month_of
from crawler.keys import Keys
from crawler.settings import Settings
from geo import Place
from tests.namespaces import delete_namespace

PEERS = 200
WINDOW = 30 * 86400
NOW = 1_715_342_400.0  # 2024-05-10 12:00 UTC


def make_places(rng: random.Random, n: int) -> list[Place]:
    """Places as a crawl sees them: a few big countries, many cities, some unmapped."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            out.append(Place())
            continue
        c = int(rng.paretovariate(1.2)) % 60
        k = rng.randrange(40)
        out.append(Place(f"Country {c}", f"City {c}.{k}", f"{c:02d}-{k:03d}") if r > 0.2 else Place(f"Country {c}"))
    return out


def make_visits(rng: random.Random, n: int, start: int) -> list[tuple[str, list[tuple[bytes, Place]]]]:
    """``n`` visits of 50 peers each over 5,000 places, IPs numbered from ``start``."""
    places = make_places(rng, 5000)
    visits = []
    ip = start
    for _ in range(n):
        peers = []
        for _ in range(PEERS):
            ip += 1
            peers.append((ipaddress.IPv4Address(ip).packed, rng.choice(places)))
        visits.append((rng.randbytes(20).hex(), peers))
    return visits


class Seed:
    """The seed's algorithm and key layout under ``prefix``."""

    def __init__(self, client: redis.Redis, prefix: str):
        self.client, self.prefix = client, prefix

    def _pairs(self, h, peers):
        month = month_of(NOW)
        for packed, p in peers:
            ip = str(ipaddress.ip_address(packed))
            for m in metrics_for(h, p.country, p.city, p.postcode):
                yield f"{self.prefix}{m.name}", ip, month

    def visit_rtt(self, h, peers) -> int:
        """One visit the seed's way, a round trip per (metric, IP): how many were new."""
        c, new = self.client, 0
        for metric, ip, month in self._pairs(h, peers):
            if c.get(f"{metric}.{ip}") is None:
                c.set(f"{metric}.{ip}", "2024-05-10T12:00:00Z", ex=WINDOW)
                c.incr(f"{metric}.{month}")
                c.incr(metric)
                new += 1
        return new

    def visit_pipelined(self, h, peers) -> int:
        """One visit the seed's way with its commands pipelined (two round trips): how many were new."""
        pairs = list(self._pairs(h, peers))
        pipe = self.client.pipeline(transaction=False)
        for metric, ip, _ in pairs:
            pipe.get(f"{metric}.{ip}")
        seen = pipe.execute()
        pipe = self.client.pipeline(transaction=False)
        new = 0
        for (metric, ip, month), s in zip(pairs, seen):
            if s is None:
                pipe.set(f"{metric}.{ip}", "2024-05-10T12:00:00Z", ex=WINDOW)
                pipe.incr(f"{metric}.{month}")
                pipe.incr(metric)
                new += 1
        if new:
            pipe.execute()
        return new


def rate(fn, visits) -> float:
    """Visits per second of ``fn(h, peers)`` over ``visits``."""
    t = time.perf_counter()
    for h, peers in visits:
        fn(h, peers)
    return len(visits) / (time.perf_counter() - t)


def memory(client, keys_pattern, sample: int | None, rng) -> tuple[int, int]:
    """(bytes by MEMORY USAGE, keys) over keys matching the pattern (sampled if ``sample``)."""
    names = list(dict.fromkeys(client.scan_iter(match=keys_pattern, count=5000)))  # SCAN may repeat a key
    chosen = names if sample is None or sample >= len(names) else rng.sample(names, sample)
    pipe = client.pipeline(transaction=False)
    for k in chosen:
        pipe.memory_usage(k, samples=0)
    total = sum(x or 0 for x in pipe.execute())
    return (total * len(names) // max(1, len(chosen))), len(names)


def main() -> None:
    """Run the benchmark and print its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds of a few visits and 20k marks (~15 s)")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    a = ap.parse_args()
    rounds, per_round, per_round_rtt, n_marks = (5, 3, 1, 20_000) if a.quick else (9, 6, 1, 300_000)
    client = redis.Redis.from_url(a.redis_url)
    ns = "bench-" + uuid.uuid4().hex[:10]
    keys = Keys(ns, rosters=True)  # a crawl made now
    rng = random.Random(42)
    out: dict = {"peers_per_visit": PEERS, "redis_version": client.info("server")["redis_version"]}
    try:
        # ~6 pairs per peer; buckets sized for ~100 marks each once all phases ran.
        speed_marks = rounds * (per_round + per_round_rtt) * PEERS * 6
        settings = Settings(redis_url=a.redis_url, namespace=ns, secret="bench-secret-0123456789",
                            stathat_ezkey="bench")
        buckets = max(64, speed_marks // 100)
        ours = Recorder(client, keys, settings, locator=object(), mark_buckets=buckets)
        seed = Seed(client, keys.scratch("seed") + ":")
        groups = [make_visits(rng, per_round, 0x0B000000 + i * 100_000) for i in range(rounds)]
        rtt_groups = [make_visits(rng, per_round_rtt, 0x0C000000 + i * 100_000) for i in range(rounds)]
        out["rounds"], out["visits_per_round"], out["rtt_visits_per_round"] = rounds, per_round, per_round_rtt
        for label in ("all_new", "all_seen"):
            # interleaved rounds on the same machine moment; ratios per round, then the median
            rows = []
            for g, rg in zip(groups, rtt_groups):
                r_ours = rate(lambda h, p: ours.record_places_many([(h, p)], NOW), g)
                r_pipe = rate(seed.visit_pipelined, g)
                r_rtt = rate(seed.visit_rtt, rg)
                rows.append((r_ours, r_pipe, r_rtt, r_ours / r_pipe, r_ours / r_rtt))
            med = [statistics.median(col) for col in zip(*rows)]
            out[label] = {
                "ours_visits_per_s": round(med[0], 1),
                "seed_pipelined_visits_per_s": round(med[1], 1),
                "seed_rtt_visits_per_s": round(med[2], 2),
                "x_vs_pipelined": round(med[3], 2),
                "x_vs_rtt": round(med[4], 1),
                "x_vs_pipelined_per_round": [round(r[3], 2) for r in rows],
                "x_vs_rtt_per_round": [round(r[4], 1) for r in rows],
            }
        # bytes per (metric, IP) mark on these realistic visits: group records included
        pairs = sum(len(metrics_for(h, p.country, p.city, p.postcode))
                    for g in groups for h, peers in g for _, p in peers)
        mixed_bytes, _ = memory(client, keys.mark_buckets_match, None, rng)
        out["bytes_per_mark_in_these_visits"] = round(mixed_bytes / pairs, 1)
        delete_namespace(client, ns)

        # --- bytes per dedupe mark -------------------------------------------------
        mem_settings = settings.replace(stathat_ezkey=None)
        mem = Recorder(client, keys, mem_settings, locator=object(), mark_buckets=max(64, n_marks // 100))
        one_country = Place()  # one metric per IP: marks only, no geo fan-out
        base = client.info("memory")["used_memory"]
        ip0 = 0x0D000000
        h = "ab" * 20
        for i in range(0, n_marks, 1000):
            mem.record_places_many([(h, [(ipaddress.IPv4Address(ip0 + j).packed, one_country)
                                         for j in range(i, min(n_marks, i + 1000))])], NOW)
        ours_delta = client.info("memory")["used_memory"] - base
        ours_bytes, ours_keys = memory(client, keys.mark_buckets_match, None, rng)
        seed_prefix = keys.scratch("seedmem") + ":"
        base = client.info("memory")["used_memory"]
        for i in range(0, n_marks, 2000):
            pipe = client.pipeline(transaction=False)
            for j in range(i, min(n_marks, i + 2000)):
                ip = str(ipaddress.IPv4Address(ip0 + j))
                pipe.set(f"{seed_prefix}torrents.{h}.users.{ip}", "2024-05-10T12:00:00Z", ex=WINDOW)
            pipe.execute()
        seed_delta = client.info("memory")["used_memory"] - base
        seed_bytes, seed_keys = memory(client, seed_prefix + "*", 5000, rng)
        out["bytes_per_mark"] = {
            "marks": n_marks,
            "ours_buckets": ours_keys,
            "ours_memory_usage": round(ours_bytes / n_marks, 1),
            "seed_memory_usage": round(seed_bytes / n_marks, 1),
            "ours_used_memory_delta": round(ours_delta / n_marks, 1),
            "seed_used_memory_delta": round(seed_delta / n_marks, 1),
            "ratio_memory_usage": round(ours_bytes / seed_bytes, 3),
            "ratio_used_memory_delta": round(ours_delta / seed_delta, 3) if seed_delta > 0 else None,
        }
        worst_new_pipe = min(out[k]["x_vs_pipelined"] for k in ("all_new", "all_seen"))
        worst_rtt = min(out[k]["x_vs_rtt"] for k in ("all_new", "all_seen"))
        out["targets"] = {
            "x_vs_pipelined>=4": worst_new_pipe >= 4,
            "x_vs_rtt>=50": worst_rtt >= 50,
            "bytes_ratio<=0.1": out["bytes_per_mark"]["ratio_memory_usage"] <= 0.1,
        }
    finally:
        delete_namespace(client, ns)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
