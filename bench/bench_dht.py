"""DHT lookups per second: peercrawl's DhtSource against a plain libtorrent loop.

Both run in the same process against the same loopback swarm, for the same
info-hashes (each announced by 3 nodes with distinct ports), with the same
number of lookups in flight, and with the same session settings (the plain
session uses DhtSource's own settings pack, so only the integration differs:
alert pump, gevent greenlets, stats snapshots). A lookup is complete when it
has all 3 announced peers (DhtSource: dht_max_peers=3).

The plain loop is what a bare libtorrent script does: keep N
``dht_get_peers`` in flight, ``wait_for_alert``, ``pop_alerts``, and start the
next lookup when one has its peers. Rounds alternate (plain, source, plain,
source...) and the best round of each counts, to damp noise from other
processes on the machine.

Prints one JSON object; ``ratio`` = best DhtSource round / best plain round
(target >= 0.8), ``median_ratio`` the same over medians.

    python bench/bench_dht.py --quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import gevent
import libtorrent as lt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler.settings import Settings  # noqa: E402
from crawler.sources.dht import DhtSource  # noqa: E402
from crawler.sources.dht_session import session_params  # noqa: E402
from tests.dht_swarm import announced_swarm  # noqa: E402

PEERS_PER_HASH = 3


def plan(n_hashes: int, swarm_size: int) -> dict:
    out = {}
    for k in range(n_hashes):
        ih = hashlib.sha1(f"bench-dht-{k}".encode()).hexdigest()
        nodes = [(k + j * 3) % swarm_size for j in range(PEERS_PER_HASH)]
        out[ih] = (nodes, 10000 + 10 * k)
    return out


def run_plain(settings: Settings, hashes: list[str], expected: dict, lookups: int, concurrency: int, timeout: float):
    """Lookups/s and completeness of a bare libtorrent loop."""
    params = session_params(settings, [], read_only=True)
    session = lt.session(params)
    try:
        for ep in settings.dht_bootstrap:
            session.add_dht_node(ep)
        time.sleep(0.5)  # bootstrap, outside the timed part (as for DhtSource)
        pending: dict[lt.sha1_hash, list] = {}  # target -> [found set, start]
        started = complete = 0
        queue = iter(range(lookups))
        t0 = time.monotonic()

        def start_next():
            nonlocal started
            i = next(queue, None)
            if i is None:
                return
            ih = lt.sha1_hash(bytes.fromhex(hashes[i % len(hashes)]))
            while ih in pending:  # same hash twice in flight: take the next
                i = next(queue, None)
                if i is None:
                    return
                ih = lt.sha1_hash(bytes.fromhex(hashes[i % len(hashes)]))
            pending[ih] = [set(), time.monotonic(), str(ih)]
            session.dht_get_peers(ih)
            started += 1

        for _ in range(concurrency):
            start_next()
        while pending:
            session.wait_for_alert(100)
            now = time.monotonic()
            for a in session.pop_alerts():
                if type(a) is lt.dht_get_peers_reply_alert:
                    entry = pending.get(a.info_hash)
                    if entry is not None:
                        entry[0].update(a.peers())
            for ih, (found, begun, hexed) in list(pending.items()):
                if len(found) >= PEERS_PER_HASH or now - begun > timeout:
                    complete += found == expected[hexed]
                    del pending[ih]
                    start_next()
        elapsed = time.monotonic() - t0
    finally:
        del session
    return started / elapsed, complete / max(started, 1)


def run_source(settings: Settings, hashes: list[str], expected: dict, lookups: int, concurrency: int):
    """Lookups/s and completeness through DhtSource, ``concurrency`` greenlets."""
    source = DhtSource(settings, settle=settings.dht_timeout)
    try:
        source.lookup(hashes[0])  # bootstrap, outside the timed part
        counter = iter(range(lookups))
        results = []

        def worker():
            for i in counter:
                ih = hashes[i % len(hashes)]
                r = source.lookup(ih)
                results.append(r.ok and r.peers == expected[ih])

        t0 = time.monotonic()
        gevent.joinall([gevent.spawn(worker) for _ in range(concurrency)], raise_error=True)
        elapsed = time.monotonic() - t0
    finally:
        source.close()
    return len(results) / elapsed, sum(results) / max(len(results), 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds instead of 6")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--swarm", type=int, default=12)
    ap.add_argument("--hashes", type=int, default=32)
    # On loopback a lookup takes milliseconds; the few that lose a reply to
    # the swarm's rate limit end at this deadline on both sides.
    ap.add_argument("--timeout", type=float, default=1.0)
    args = ap.parse_args(argv)
    # Each round runs in a fresh session; its DHT upload limiter lets a burst
    # of ~1000+ lookups through, after which dht_upload_rate_limit (200 KB/s)
    # caps both sides alike (see docs/dht.md), so rounds stay that size.
    lookups = 1000
    rounds = 2 if args.quick else 6

    t_setup = time.monotonic()
    with announced_swarm(size=args.swarm, first_ip=100, announcements=plan(args.hashes, args.swarm)) as swarm:
        setup = time.monotonic() - t_setup
        hashes = list(swarm.expected)
        common = dict(
            dht_bootstrap=tuple(swarm.endpoints),
            allow_private=True,
            dht_max_peers=PEERS_PER_HASH,
            dht_lookups_in_flight=args.concurrency,
            dht_timeout=args.timeout,
            trackers=(),
        )
        plain, source = [], []
        for r in range(rounds):
            s_plain = Settings(dht_listen=(f"127.0.0.{90 + r}", 0), **common)
            plain.append(run_plain(s_plain, hashes, swarm.expected, lookups, args.concurrency, args.timeout))
            s_src = Settings(dht_listen=(f"127.0.0.{95 + r}", 0), **common)
            source.append(run_source(s_src, hashes, swarm.expected, lookups, args.concurrency))
    best_plain = max(plain)
    best_source = max(source)
    print(json.dumps({
        "benchmark": "dht_lookups",
        "mode": "quick" if args.quick else "full",
        "swarm_nodes": args.swarm,
        "info_hashes": args.hashes,
        "peers_per_hash": PEERS_PER_HASH,
        "concurrency": args.concurrency,
        "lookups_per_round": lookups,
        "timeout_s": args.timeout,
        "rounds": rounds,
        "swarm_setup_s": round(setup, 2),
        "plain_lookups_per_s": round(best_plain[0], 1),
        "plain_complete": round(best_plain[1], 4),
        "dht_source_lookups_per_s": round(best_source[0], 1),
        "dht_source_complete": round(best_source[1], 4),
        "ratio": round(best_source[0] / best_plain[0], 3),
        "median_ratio": round(statistics.median(x[0] for x in source) / statistics.median(x[0] for x in plain), 3),
        "rounds_plain": [round(x[0], 1) for x in plain],
        "rounds_source": [round(x[0], 1) for x in source],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
