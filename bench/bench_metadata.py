"""What one metadata fetch (BEP 9) costs: Python CPU, wall time and bytes per fetch, from real seeders.

Usage: python bench/bench_metadata.py [--fetches 20]

Two libtorrent seeders on loopback (tests/metadata_peers.py) seed a
three-file and a one-file torrent; one ``MetadataFetcher`` fetches each
``--fetches`` times, one after the other (a fetch removes its torrent, so
each starts afresh, as a worker's would for a new torrent). Per torrent:
Python CPU and wall time per fetch (median and worst), and the fetcher
session's bytes received and sent per fetch (protocol only: payload stays
0). Prints JSON. Fetches are reported apart from visits: a worker makes
one per torrent with peers and no name, once, under the namespace's
budget (``PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND``).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crawler import logs
from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher
from crawler.sources.metadata.metadata_info import TorrentInfo
from tests.metadata_peers import Seeder, make_torrent


def main() -> None:
    """Run the fetches and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fetches", type=int, default=20, help="fetches per torrent (default 20)")
    a = ap.parse_args()
    logs.configure("warning", "json")
    root = Path(tempfile.mkdtemp(prefix="bench-metadata-"))
    multi, multi_hash = make_torrent(root, "three files", [40_000, 1, 70_000])
    single, single_hash = make_torrent(root, "single.iso", [50_000])
    seeders = [Seeder(ip, [multi, single], root) for ip in ("127.0.0.2", "127.0.0.3")]
    peers = [s.endpoint for s in seeders]
    out: dict = {"fetches_per_torrent": a.fetches, "seeders": len(seeders), "torrents": {}}
    t0 = time.monotonic()
    try:
        with MetadataFetcher(Settings(allow_private=True, metadata_listen=(("127.0.0.1", 0),))) as f:
            for label, ih in (("three files", multi_hash), ("one file", single_hash)):
                cpu, wall, ok = [], [], 0
                before = f.counters() or {}
                for _ in range(a.fetches):
                    c, w = time.process_time(), time.monotonic()
                    got = f.fetch(ih, peers)
                    cpu.append(1000 * (time.process_time() - c))
                    wall.append(1000 * (time.monotonic() - w))
                    ok += isinstance(got, TorrentInfo)
                after = f.counters() or {}

                def per(name: str, b: dict = before, x: dict = after) -> float:
                    return round((x.get(name, 0) - b.get(name, 0)) / a.fetches, 1)

                out["torrents"][label] = {
                    "ok": ok,
                    "python_cpu_ms_per_fetch": {"median": round(statistics.median(cpu), 2), "max": round(max(cpu), 2)},
                    "wall_ms_per_fetch": {"median": round(statistics.median(wall), 1), "max": round(max(wall), 1)},
                    "bytes_received_per_fetch": per("net.recv_bytes"),
                    "bytes_sent_per_fetch": per("net.sent_bytes"),
                    "payload_bytes_received": after.get("net.recv_payload_bytes", 0),
                    "payload_bytes_sent": after.get("net.sent_payload_bytes", 0),
                }
                print(f"bench_metadata: {label} done", file=sys.stderr)
    finally:
        for s in seeders:
            s.close()
    out["bench_seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
