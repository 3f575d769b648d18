"""What a visit's coverage fields cost Redis: complete.lua with and without them, interleaved in one run.

Usage: python bench/bench_visit_fields.py [--torrents 5000] [--rounds 3]

A private redis-server (bench/cluster_nodes.py, persistence off). Each round
claims and completes ``--torrents`` torrents twice on the same build: once
as a visit with no reported swarm size and no new IP (the script's cheapest
path, what it did before coverage), once with a reported size and new IPs
(``reported``, the day's ``n:<day>`` field, the rates hash's ``cc``/``cr``
sums). Redis's own CPU (INFO cpu) and the scripts' time (INFO
commandstats, EVALSHA) per completion, medians over rounds, in alternating
order. The figure to read is the difference per completion against a
visit's whole Redis cost (bench_worker: ~0.2 ms per revisit): the
acceptance line is 5 %. A name costs a visit nothing: it is written by add,
once per torrent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster_nodes import Topology
from redis_cpu import redis_cpu

from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.settings import Settings
from crawler.torrents.items import NewItem


def run(client, n: int, coverage: bool, tag: str) -> dict:
    """Add ``n`` torrents, claim them, complete each; Redis CPU and EVALSHA time of the completions."""
    keys = Keys(f"fields-{tag}")
    q = Queue(client, keys, Settings(revisit_seconds=3600))
    hashes = [hashlib.sha1(f"{tag}-{i}".encode()).hexdigest() for i in range(n)]
    now = time.time()
    q.add([NewItem(h) for h in hashes], now=now - 1)
    leases = []
    while got := q.claim(500, now=now):
        leases += got
    client.config_resetstat()
    cpu0 = redis_cpu(client)
    for lease in leases:
        if coverage:
            q.complete(lease, Outcome.SOME, peers=40, seeders=20, leechers=60, reported=80, new=40, now=now)
        else:
            q.complete(lease, Outcome.SOME, peers=40, seeders=20, leechers=60, now=now)
    cpu = redis_cpu(client) - cpu0
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    client.flushall()
    return {"redis_cpu_us": 1e6 * cpu / len(leases), "evalsha_us": stats.get("usec_per_call", 0.0)}


def main() -> None:
    """Run the rounds and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torrents", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out: dict = {"torrents": a.torrents, "rounds": a.rounds, "without": [], "with": []}
    with Topology(None) as tp:
        client = tp.nodes[tp.ports[0]]
        for r in range(a.rounds):
            order = [False, True] if r % 2 == 0 else [True, False]
            for cov in order:
                out["with" if cov else "without"].append(run(client, a.torrents, cov, f"{r}-{cov}"))
    for side in ("without", "with"):
        out[side + "_median"] = {k: round(statistics.median(x[k] for x in out[side]), 2)
                                 for k in ("redis_cpu_us", "evalsha_us")}
    w, wo = out["with_median"], out["without_median"]
    out["added_per_completion_us"] = {k: round(w[k] - wo[k], 2) for k in w}
    out["added_vs_a_revisits_redis_cpu_0_2_ms"] = round((w["redis_cpu_us"] - wo["redis_cpu_us"]) / 200, 3)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
