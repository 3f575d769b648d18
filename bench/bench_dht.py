"""DHT lookups per second: peercrawl's DhtSource against a plain libtorrent loop.

Both sides run in this process against the same loopback swarm, for the same
sequence of lookups (lookup i asks for info-hash i mod H, each hash announced
by 3 nodes with distinct ports), with the same number of lookups in flight,
and on the same libtorrent node: the plain loop builds its session with
``crawler.sources.dht.dht_session.new_session`` (DhtSource's settings pack, alert
mask, IP filter and bootstrap routers), so only the integration differs: the
alert pump, gevent greenlets, per-alert routing, counters snapshots, results
and per-node pacing. A lookup is complete when it has the 3 announced peers
(DhtSource: ``dht_max_peers=3``) or at its 1 s deadline.

The plain loop is what a bare libtorrent script does: keep N
``dht_get_peers`` in flight, ``wait_for_alert``, ``pop_alerts``, and start the
next lookup when one has its peers.

Fairness:

- Each side starts one node on its own loopback address and waits, both
  alike, until its routing table holds half the swarm's non-router nodes,
  then runs one untimed lookup per info-hash (which fills the table). Both
  nodes then stay up for the whole run.
- Rounds (batches of ``--lookups`` lookups, the same info-hashes in the same
  order on both sides) alternate in ABBA order (plain, source, source,
  plain, ...), so neither side always runs first or last, and each
  DhtSource round has a plain neighbour measured a moment apart, under the
  same machine load (``paired_ratios``). With a fresh node per round, or
  each side's rounds seconds apart, other work on the machine would decide
  the ratio.
- A round's rate counts from the first start to the start of its last
  lookup (``lookups - concurrency`` completed by then): the final drain, where
  one lookup that lost a reply waits its whole 1 s deadline with nothing else
  in flight, is left out on both sides. It made whole rounds swing 2x.
- The swarm must not be the ceiling: a swarm node answers queries within its
  ``dht_upload_rate_limit`` (400 KB/s, 3 s of burst) and silently drops the
  rest. ``swarm_dropped`` counts those drops over the run; it should be 0.
- Both nodes accept any packet rate from the swarm (``EXTRA``): libtorrent's
  ``dht_block_ratelimit`` counts replies too, and here one swarm node answers
  a node thousands of times a second. With the crawler's own limit (100/s,
  plenty for a paced crawler) the swarm nodes are ignored for 300 s after
  1 000 replies and most lookups time out, on both sides alike.
- Pacing: DhtSource paces queries per remote node (docs/dht.md). On a
  12-node swarm every lookup queries most nodes, so the real limit (4
  queries/s per node) would cap DhtSource, and any polite client, at about 5
  lookups/s: the benchmark would measure the limit, not the code. The swarm
  nodes accept any rate (tests/dht_swarm.py) and DhtSource runs with a
  per-node rate that never binds here (``NODE_RATE``), so its pacing
  bookkeeping still runs for every query and lookup and its cost is in the
  figures; the plain loop has none. tests/test_dht_pacing.py shows the limit
  itself against a swarm that bans.

The process (12 swarm nodes, the crawler node, Python) keeps the 2 cores of
the test machine busy, so the ratio follows CPU per lookup, mostly
libtorrent's; ``python_cpu_us_per_lookup`` is the Python thread's share.
Other load on the machine moves single rounds by +-30 %: read medians.

Prints one JSON object. ``median_paired_ratio`` (the target: >= 0.8) is the
median over rounds of DhtSource's rate divided by the rate of the plain
round run next to it: each pair saw the same machine load, so it is the
steadiest figure when other work on the machine comes and goes during a
run. ``median_ratio`` = median DhtSource round / median plain round, which
mixes rounds run under different load; ``ratio_best`` is best/best, for
reference only.

    python bench/bench_dht.py --quick      # 12 rounds per side, ~20 s
    python bench/bench_dht.py              # 30 rounds per side, ~45 s
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
from crawler.sources.dht.dht import DhtSource
from crawler.sources.dht.dht_session import new_session, resolve_bootstrap
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
    """Which swarm nodes announce each of ``n_hashes`` info-hashes, on which port: info-hash -> (nodes, port)."""
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


class PlainSide:
    """A bare libtorrent loop on DhtSource's node (same settings pack, mask, filter, routers)."""

    def __init__(self, settings: Settings, hashes: list[str], expected: dict, concurrency: int, table: int):
        self.hashes, self.expected, self.concurrency = hashes, expected, concurrency
        self.timeout = settings.dht_timeout
        bootstrap = resolve_bootstrap(settings.dht_bootstrap, settings.allow_private)
        self.session = new_session(settings, bootstrap, read_only=True, extra=EXTRA)
        end = time.monotonic() + 10
        while _counters(self.session).get("dht.dht_nodes", 0) < table and time.monotonic() < end:
            time.sleep(0.05)
        self.batch(range(len(hashes)))  # warm-up, untimed

    def batch(self, indexes: range) -> Round:
        """Look up ``indexes``' info-hashes, ``concurrency`` at a time, straight on the libtorrent session."""
        session, hashes = self.session, self.hashes
        pending: dict[lt.sha1_hash, list] = {}  # target -> [[found set, start, hex], ...]
        started = self._complete = 0
        last_start = 0.0
        queue = iter(indexes)
        last = indexes[-1]

        def start_next() -> None:
            nonlocal started, last_start
            i = next(queue, None)
            if i is None:
                return
            if i == last:
                last_start = time.monotonic()
            hexed = hashes[i % len(hashes)]
            ih = lt.sha1_hash(bytes.fromhex(hexed))
            pending.setdefault(ih, []).append([set(), time.monotonic(), hexed])
            session.dht_get_peers(ih)
            started += 1

        cpu0, t0 = time.thread_time(), time.monotonic()
        for _ in range(self.concurrency):
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
            for _ in range(self._settle(pending, time.monotonic())):
                start_next()
        return Round(started, self._complete, last_start - t0, time.thread_time() - cpu0, self.concurrency)

    def _settle(self, pending: dict, now: float) -> int:
        """Drop the lookups that found their peers or timed out (counting the complete); how many."""
        done = 0
        for ih, entries in list(pending.items()):
            for e in list(entries):
                found, begun, hexed = e
                if len(found) >= PEERS_PER_HASH or now - begun > self.timeout:
                    self._complete += found == self.expected[hexed]
                    entries.remove(e)
                    done += 1
            if not entries:
                pending.pop(ih, None)
        return done

    def close(self) -> None:
        """Drop the session (libtorrent closes it)."""
        self.session = None


class SourceSide:
    """The same lookups through DhtSource, ``concurrency`` greenlets."""

    def __init__(self, settings: Settings, hashes: list[str], expected: dict, concurrency: int, table: int):
        self.hashes, self.expected, self.concurrency = hashes, expected, concurrency
        self.source = DhtSource(settings.replace(dht_settle=settings.dht_timeout), extra=EXTRA)
        end = time.monotonic() + 10
        while self.source.dht_health()["nodes"] < table and time.monotonic() < end:
            gevent.sleep(0.05)
        self.batch(range(len(hashes)))  # warm-up, untimed

    def batch(self, indexes: range) -> Round:
        """Look up ``indexes``' info-hashes through ``DhtSource.lookup``, ``concurrency`` greenlets."""
        source, hashes, expected = self.source, self.hashes, self.expected
        counter = iter(indexes)
        results: list[bool] = []
        last_start = 0.0
        last = indexes[-1]

        def worker() -> None:
            nonlocal last_start
            for i in counter:
                if i == last:
                    last_start = time.monotonic()
                ih = hashes[i % len(hashes)]
                r = source.lookup(ih)
                results.append(r.ok and r.peers == expected[ih])

        cpu0, t0 = time.thread_time(), time.monotonic()
        gevent.joinall([gevent.spawn(worker) for _ in range(self.concurrency)], raise_error=True)
        return Round(len(results), sum(results), last_start - t0, time.thread_time() - cpu0, self.concurrency)

    def close(self) -> None:
        """Close the DhtSource."""
        self.source.close()


@dataclass
class Round:
    """One timed batch of lookups on one side."""

    started: int
    complete: int
    elapsed: float  # first start to last start: the drain at the end is left out
    cpu: float  # CPU seconds of the Python thread over the whole batch
    concurrency: int

    @property
    def rate(self) -> float:
        """Lookups per second while the queue was full (last start: all but
        ``concurrency`` had completed)."""
        return (self.started - self.concurrency) / self.elapsed

    @property
    def completeness(self) -> float:
        """The share of lookups that found every announced peer."""
        return self.complete / max(self.started, 1)

    @property
    def cpu_us(self) -> float:
        """Python CPU microseconds per lookup."""
        return 1e6 * self.cpu / max(self.started, 1)


def main(argv=None) -> int:
    """Run the benchmark and print its JSON; 0 when both sides completed their lookups."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="12 rounds per side instead of 30")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per side")
    ap.add_argument("--lookups", type=int, default=1000, help="timed lookups per round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--swarm", type=int, default=12)
    ap.add_argument("--hashes", type=int, default=64)
    # On loopback a lookup takes milliseconds; one that lost a reply ends at
    # this deadline on both sides.
    ap.add_argument("--timeout", type=float, default=1.0)
    # Between rounds: the swarm nodes' reply quota (400 KB/s) refills.
    ap.add_argument("--pause", type=float, default=0.3)
    args = ap.parse_args(argv)
    from crawler import logs

    logs.configure("warning", "json")  # logs on stderr: stdout is the JSON result
    per_side = args.rounds or (12 if args.quick else 30)

    t_setup = time.monotonic()
    with announced_swarm(size=args.swarm, first_ip=100, announcements=plan(args.hashes, args.swarm)) as swarm:
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
        sides = {
            "plain": PlainSide(Settings(dht_listen=(("127.0.0.30", 0),), **common), hashes, swarm.expected,
                               args.concurrency, table),
            "source": SourceSide(Settings(dht_listen=(("127.0.0.31", 0),), **common), hashes, swarm.expected,
                                 args.concurrency, table),
        }
        setup = time.monotonic() - t_setup
        dropped_before = swarm_dropped(swarm)
        rounds: dict[str, list[Round]] = {"plain": [], "source": []}
        try:
            for r in range(per_side):
                # Both sides look up the same info-hashes in the same order.
                indexes = range(r * args.lookups, (r + 1) * args.lookups)
                for side in ("plain", "source") if r % 2 == 0 else ("source", "plain"):
                    time.sleep(args.pause)
                    rounds[side].append(sides[side].batch(indexes))
        finally:
            for side in sides.values():
                side.close()
        dropped = swarm_dropped(swarm) - dropped_before
    plain, source = rounds["plain"], rounds["source"]
    paired = [s.rate / p.rate for p, s in zip(plain, source, strict=True)]
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
        "setup_s": round(setup, 2),
        "swarm_dropped": dropped,
        "plain_lookups_per_s_median": round(med_plain, 1),
        "dht_source_lookups_per_s_median": round(med_source, 1),
        "median_paired_ratio": round(statistics.median(paired), 3),
        "median_ratio": round(med_source / med_plain, 3),
        "paired_ratios": [round(x, 3) for x in paired],
        "ratio_best": round(max(x.rate for x in source) / max(x.rate for x in plain), 3),
        "python_cpu_us_per_lookup": {
            "plain": round(statistics.median(x.cpu_us for x in plain), 1),
            "dht_source": round(statistics.median(x.cpu_us for x in source), 1),
        },
        "plain_complete": round(sum(x.complete for x in plain) / sum(x.started for x in plain), 4),
        "dht_source_complete": round(sum(x.complete for x in source) / sum(x.started for x in source), 4),
        "rounds_plain": [round(x.rate, 1) for x in plain],
        "rounds_source": [round(x.rate, 1) for x in source],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
