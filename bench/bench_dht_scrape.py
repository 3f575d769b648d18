"""What one DHT scrape (BEP 33) costs: Python CPU, wall time and queries per scrape, and its estimate.

Usage: python bench/bench_dht_scrape.py [--scrapes 30]

The swarm of tests/test_dht_scrape.py (16 libtorrent nodes on loopback
holding swarms of 20, 200 and 2,000 IPs, each announced from its own
address to two of the 8 nodes nearest its hash). For each swarm,
``--scrapes`` scrapes one after the other from the same two contacts (a
visit's scrape starts from its lookup's last nodes, nearer the hash: fewer
hops, so these are the dearer case), over one socket paced as a worker's is
(a node: 0.5 queries/s, an eighth of the default node rate; a new socket
per scrape, as each would otherwise wait for the last one's places at the
same nodes). Per swarm: Python CPU and wall time per scrape (median and
worst), queries and answers per scrape, the estimate against the truth.
Prints JSON. The DHT lookups a visit makes are bench_dht's; the scrape is
counted apart because only visits whose trackers give no counts make one.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crawler.settings import Settings
from crawler.sources.addresses import policy
from crawler.sources.dht.dht_scrape import scrape
from crawler.sources.dht.dht_sizes import NODE_SHARE, OVERALL_RATE
from crawler.sources.dht.krpc_socket import KrpcSocket
from tests.test_dht_scrape import HASHES, SIZES, filled_swarm


def main() -> None:
    """Run the scrapes and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scrapes", type=int, default=30, help="scrapes per swarm (default 30)")
    a = ap.parse_args()
    node_rate = Settings().dht_node_rate * NODE_SHARE
    out: dict = {"scrapes_per_swarm": a.scrapes, "node_rate": node_rate, "overall_rate": OVERALL_RATE, "swarms": {}}
    t0 = time.monotonic()
    with filled_swarm() as f:
        out["setup_s"] = round(time.monotonic() - t0, 1)
        contacts = f.swarm.endpoints[:2]
        for ih, n in zip(HASHES, SIZES, strict=True):
            cpu, wall, queries, answered, totals = [], [], [], [], []
            for i in range(a.scrapes):
                with KrpcSocket(bind=(f"127.0.34.{i % 250 + 1}", 0), node_rate=node_rate,
                                overall_rate=OVERALL_RATE) as sock:
                    c, w = time.process_time(), time.monotonic()
                    r = scrape(sock, ih, contacts, time.monotonic() + 10, check=policy(True))
                    cpu.append(1000 * (time.process_time() - c))
                    wall.append(1000 * (time.monotonic() - w))
                queries.append(r.queries)
                answered.append(r.answered)
                totals.append(r.seeds + r.peers)
            out["swarms"][str(n)] = {
                "truth": len(f.seeds[ih]) + len(f.leechers[ih]),
                "estimate": round(statistics.median(totals), 1),
                "python_cpu_ms_per_scrape": {"median": round(statistics.median(cpu), 2), "max": round(max(cpu), 2)},
                "wall_ms_per_scrape": {"median": round(statistics.median(wall), 1), "max": round(max(wall), 1)},
                "queries_per_scrape": statistics.median(queries),
                "answers_per_scrape": statistics.median(answered),
            }
            print(f"bench_dht_scrape: {n} done", file=sys.stderr)
    out["bench_seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
