"""DHT lookups per second: peercrawl's DhtSource against a plain libtorrent loop.

Both sides run in this process against the same loopback swarm, for the same
sequence of lookups (lookup i asks for info-hash i mod H, each hash announced
by 3 nodes with distinct ports), with the same number of lookups in flight,
and on the same libtorrent node: the plain loop builds its session with
``crawler.sources.dht_session.new_session`` (DhtSource's settings pack, IP
filter and bootstrap routers), so only the integration differs: the alert
pump, gevent greenlets, counters snapshots and per-node pacing. A lookup is
complete when it has the 3 announced peers (DhtSource: ``dht_max_peers=3``)
or at its deadline.

The plain loop is what a bare libtorrent script does: keep N
``dht_get_peers`` in flight, ``wait_for_alert``, ``pop_alerts``, and start the
next lookup when one has its peers.

Fairness:

- Each round starts a fresh node on its own loopback address and waits, on
  both sides alike, until its routing table holds the swarm's nodes (minus the
  bootstrap routers, which libtorrent never puts in its table), then runs one
  untimed lookup per info-hash; only then is the round timed.
- Rounds are interleaved in ABBA order (plain, source, source, plain, ...), so
  neither side always runs first, after a pause that lets the swarm nodes'
  reply quota refill.
- The swarm must not be the ceiling: every swarm node answers queries within
  its ``dht_upload_rate_limit`` (400 KB/s, with a 3 s burst) and silently
  drops queries beyond it. ``swarm_dropped`` counts those drops over the
  whole run; it should be 0, else both sides were measured against the
  swarm's quota and not their own speed.
- Pacing: DhtSource paces queries per remote node (docs/dht.md). On a
  12-node swarm every lookup queries nearly every node, so the real limit
  (4 queries/s per node) would cap both the source and any honest client at
  about 4 lookups/s and the benchmark would measure the limit, not the code.
  The swarm nodes therefore accept any rate from the crawler (they raise
  ``dht_block_ratelimit``) and DhtSource runs with a per-node rate that does
  not bind (``NODE_RATE``): its pacing bookkeeping still runs for every query
  and lookup, so its cost is in the figures; the plain loop has none.

Prints one JSON object. ``median_ratio`` = median DhtSource round / median
plain round (the target: >= 0.8); ``paired_ratios`` compares each
DhtSource round with the plain round next to it; ``ratio_best`` is best/best.

    python bench/bench_dht.py --quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gevent
import libtorrent as lt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler.settings import Settings
from crawler.sources.dht import DhtSource
from crawler.sources.dht_session import new_session, resolve_bootstrap
from tests.dht_swarm import announced_swarm

PEERS_PER_HASH = 3
# Bootstrap routers given to the crawler node: libtorrent never puts routers
# in its routing table, so the other swarm nodes make up the table.
ROUTERS = 3
# Queries per second per remote node for DhtSource in this benchmark: high
# enough never to bind on a 12-node swarm (see the docstring).
NODE_RATE = 1e6
# Both sides' nodes: accept any packet rate from the swarm. The crawler's own
# limit (100/s per address, dht_session.BLOCK_RATELIMIT) is far above the
# replies a paced crawler gets from one node, but here each swarm node answers
# thousands of queries a second and would be ignored for 300 s.
EXTRA = {"dht_block_ratelimit": 1_000_000}


def plan(n_hashes: int, swarm_size: int) -> dict:
    out = {}
    for k in range(n_hashes):
        ih = hashlib.sha1(f"bench-dht-{k}".encode()).hexdigest()
        nodes = [(k + j * 3) % swarm_size for j in range(PEERS_PER_HASH)]
        out[ih] = (nodes, 10000 + 10 * k)
    return out


def _counters(session, timeout: float = 2.0) -> dict:
    """Session counters through a blocking wait (plain side and swarm only)."""
    session.post_session_stats()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        session.wait_for_alert(100)
        for a in session.pop_alerts():
            if type(a) is lt.session_stats_alert:
                return a.values
    return {}


def swarm_dropped(swarm) -> int:
    """Queries the swarm nodes dropped so far (quota or rate limit)."""
    return sum(_counters(s).get("dht.dht_messages_in_dropped", 0) for s in swarm.nodes)


def _plain_batch(session, hashes: list[str], expected: dict, indexes: range, concurrency: int,
                 timeout: float) -> tuple[int, int, float, float]:
    """Run ``indexes`` lookups, ``concurrency`` at a time: (started, complete,
    seconds until the last one started, main-thread CPU seconds)."""
    pending: dict[lt.sha1_hash, list] = {}  # target -> [[found set, start, hex], ...]
    started = complete = 0
    last_start = 0.0
    queue = iter(indexes)
    n = len(indexes)

    def start_next() -> None:
        nonlocal started, last_start
        i = next(queue, None)
        if i is None:
            return
        if i == n - 1:
            last_start = time.monotonic()
        hexed = hashes[i % len(hashes)]
        ih = lt.sha1_hash(bytes.fromhex(hexed))
        pending.setdefault(ih, []).append([set(), time.monotonic(), hexed])
        session.dht_get_peers(ih)
        started += 1

    cpu0, t0 = time.thread_time(), time.monotonic()
    for _ in range(concurrency):
        start_next()
    while pending:
        session.wait_for_alert(100)
        for a in session.pop_alerts():
            if type(a) is lt.dht_get_peers_reply_alert:
                entries = pending.get(a.info_hash)
                if entries:
                    peers = a.peers()
                    for e in entries:
                        e[0].update(peers)
        now = time.monotonic()
        for ih, entries in list(pending.items()):
            for e in list(entries):
                found, begun, hexed = e
                if len(found) >= PEERS_PER_HASH or now - begun > timeout:
                    complete += found == expected[hexed]
                    entries.remove(e)
                    start_next()
            if not entries:
                pending.pop(ih, None)
    return started, complete, last_start - t0, time.thread_time() - cpu0


def run_plain(settings: Settings, hashes: list[str], expected: dict, lookups: int, concurrency: int,
              table: int) -> Round:
    """A bare libtorrent loop on DhtSource's node (same settings pack, filter, routers)."""
    bootstrap = resolve_bootstrap(settings.dht_bootstrap, settings.allow_private)
    # DhtSource's alert mask too: libtorrent posts the same alerts on both
    # sides (the plain loop skips the per-query ones it does not need).
    session = new_session(settings, bootstrap, read_only=True, extra=EXTRA)
    end = time.monotonic() + 10
    while _counters(session).get("dht.dht_nodes", 0) < table and time.monotonic() < end:
        time.sleep(0.05)
    _plain_batch(session, hashes, expected, range(len(hashes)), concurrency, settings.dht_timeout)  # warm-up
    started, complete, elapsed, cpu = _plain_batch(
        session, hashes, expected, range(lookups), concurrency, settings.dht_timeout
    )
    return Round(started, complete, elapsed, cpu, concurrency)


def run_source(settings: Settings, hashes: list[str], expected: dict, lookups: int, concurrency: int,
               table: int) -> Round:
    """The same lookups through DhtSource, ``concurrency`` greenlets."""
    source = DhtSource(settings, settle=settings.dht_timeout, extra=EXTRA)
    try:
        end = time.monotonic() + 10
        while source.dht_health()["nodes"] < table and time.monotonic() < end:
            gevent.sleep(0.05)

        def batch(indexes: range) -> tuple[int, int, float, float]:
            counter = iter(indexes)
            results: list[bool] = []
            last_start = 0.0
            n = len(indexes)

            def worker() -> None:
                nonlocal last_start
                for i in counter:
                    if i == n - 1:
                        last_start = time.monotonic()
                    ih = hashes[i % len(hashes)]
                    r = source.lookup(ih)
                    results.append(r.ok and r.peers == expected[ih])

            cpu0, t0 = time.thread_time(), time.monotonic()
            gevent.joinall([gevent.spawn(worker) for _ in range(concurrency)], raise_error=True)
            return len(results), sum(results), last_start - t0, time.thread_time() - cpu0

        batch(range(len(hashes)))  # warm-up, untimed
        started, complete, elapsed, cpu = batch(range(lookups))
    finally:
        source.close()
    return Round(started, complete, elapsed, cpu, concurrency)


@dataclass
class Round:
    started: int
    complete: int
    elapsed: float  # first start to last start: the drain at the end is left out
    cpu: float  # CPU seconds of the Python thread over the whole round
    concurrency: int

    @property
    def rate(self) -> float:
        """Lookups per second while the queue was full (last start: all but
        ``concurrency`` had completed)."""
        return (self.started - self.concurrency) / self.elapsed

    @property
    def completeness(self) -> float:
        return self.complete / max(self.started, 1)

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cpu / max(self.started, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="6 rounds (3 per side) instead of 12")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per side")
    ap.add_argument("--lookups", type=int, default=2000, help="timed lookups per round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--swarm", type=int, default=12)
    ap.add_argument("--hashes", type=int, default=64)
    # On loopback a lookup takes milliseconds; one that lost a reply ends at
    # this deadline on both sides.
    ap.add_argument("--timeout", type=float, default=1.0)
    # Between rounds: the swarm nodes' reply quota (400 KB/s) refills.
    ap.add_argument("--pause", type=float, default=1.0)
    args = ap.parse_args(argv)
    per_side = args.rounds or (3 if args.quick else 6)

    t_setup = time.monotonic()
    with announced_swarm(size=args.swarm, first_ip=100, announcements=plan(args.hashes, args.swarm)) as swarm:
        setup = time.monotonic() - t_setup
        hashes = list(swarm.expected)
        common = {
            "dht_bootstrap": tuple(swarm.endpoints[:ROUTERS]),
            "allow_private": True,
            "dht_max_peers": PEERS_PER_HASH,
            "dht_lookups_in_flight": args.concurrency,
            "dht_timeout": args.timeout,
            "dht_node_rate": NODE_RATE,
            "trackers": (),
        }
        # Half the nodes that are not routers: the table holds ~6 of 9 after
        # the bootstrap and fills up with the warm-up lookups.
        table = (args.swarm - ROUTERS) // 2
        dropped_before = swarm_dropped(swarm)
        plain: list[Round] = []
        source: list[Round] = []
        order = []
        for r in range(per_side):
            order += ["plain", "source"] if r % 2 == 0 else ["source", "plain"]
        for n, side in enumerate(order):
            time.sleep(args.pause)
            s = Settings(dht_listen=(f"127.0.0.{30 + n}", 0), **common)
            run = run_plain if side == "plain" else run_source
            (plain if side == "plain" else source).append(
                run(s, hashes, swarm.expected, args.lookups, args.concurrency, table)
            )
        dropped = swarm_dropped(swarm) - dropped_before
    med_plain = statistics.median(x.rate for x in plain)
    med_source = statistics.median(x.rate for x in source)
    print(json.dumps({
        "benchmark": "dht_lookups",
        "mode": "quick" if args.quick else "full",
        "swarm_nodes": args.swarm,
        "info_hashes": args.hashes,
        "peers_per_hash": PEERS_PER_HASH,
        "concurrency": args.concurrency,
        "lookups_per_round": args.lookups,
        "timeout_s": args.timeout,
        "rounds_per_side": per_side,
        "swarm_setup_s": round(setup, 2),
        "swarm_dropped": dropped,
        "plain_lookups_per_s_median": round(med_plain, 1),
        "dht_source_lookups_per_s_median": round(med_source, 1),
        "median_ratio": round(med_source / med_plain, 3),
        "paired_ratios": [round(s.rate / p.rate, 3) for p, s in zip(plain, source, strict=True)],
        "ratio_best": round(max(x.rate for x in source) / max(x.rate for x in plain), 3),
        "python_cpu_us_per_lookup": {
            "plain": round(statistics.median(x.cpu_us for x in plain), 1),
            "dht_source": round(statistics.median(x.cpu_us for x in source), 1),
        },
        "plain_complete": [round(x.completeness, 4) for x in plain],
        "dht_source_complete": [round(x.completeness, 4) for x in source],
        "rounds_plain": [round(x.rate, 1) for x in plain],
        "rounds_source": [round(x.rate, 1) for x in source],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
