"""The DHT with several worker processes on one machine: a node per process, against one node for all.

Usage: python bench/bench_dht_processes.py [--lookups 80] [--processes 2]

Every worker process of one machine sends from one address, and the nodes a
crawler queries count packets per address, not per port or node ID:
libtorrent's dos_blocker ignores an address for 5 minutes once it has sent
10 x ``dht_block_ratelimit`` (5) = 50 packets within 10 s, and other
implementations keep similar per-IP limits. (Routing-table limits per IP do
not apply: the crawler's nodes are read-only, BEP 43, so no node adds them
to its table.) So the question is what N nodes on one address do to the
nodes they share.

A swarm of 12 libtorrent nodes on 127.0.0.70-81 keeps libtorrent's own ban
(the suite's strict swarm, tests/test_dht_pacing.py) and logs every packet
and ban. A burst of ``--lookups`` lookups (two announced info-hashes, the
rest unannounced: a lookup of a dead torrent asks the most nodes) is then
made three ways, every crawler node on 127.0.0.31:

- ``one_node``: one process, one DhtSource, the whole burst (what one child
  serving every child's lookups would send);
- ``node_per_process_split``: ``--processes`` processes, each its own node
  and its share of the burst, each with the per-node rate divided by the
  processes (what ``peercrawl worker --processes N`` does: workers/supervisor.py);
- ``node_per_process_unsplit``: the same without dividing the rate.

Per way: whether any swarm node banned the crawler's address, the most
packets (and get_peers queries) one node got from it within any 10 s, the
burst's wall time, the lookups that succeeded and whether each announced
hash's peers were found exactly. Prints JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CRAWLER_IP = "127.0.0.31"
MARK = "lookups: "  # the line of a process's output that holds its figures (the rest is its log)


def hashes_of(lookups: int) -> list[str]:
    """The burst: the two announced test hashes, the unannounced one, then unannounced ones."""
    from tests.dht_swarm import HASH_A, HASH_B, HASH_C

    return [HASH_A, HASH_B, HASH_C] + [hashlib.sha1(f"procs-{i}".encode()).hexdigest() for i in range(lookups - 3)]


def child(endpoints: list[tuple[str, int]], hashes: list[str], rate: float, start_at: float) -> None:
    """One worker process's node: bootstrap, wait for ``start_at``, look every hash up at once; JSON out."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from crawler.settings import Settings
    from crawler.sources.dht.dht import DhtSource

    s = Settings(dht_bootstrap=tuple(endpoints[:3]), dht_listen=((CRAWLER_IP, 0),), allow_private=True,
                 dht_timeout=60.0, trackers=(), dht_node_rate=rate, dht_settle=0.5)
    with DhtSource(s) as source:
        gevent.sleep(max(0.0, start_at - time.time()))
        t0 = time.monotonic()
        jobs = [gevent.spawn(source.lookup, h) for h in hashes]
        gevent.joinall(jobs, raise_error=True)
        elapsed = time.monotonic() - t0
        results = [j.value for j in jobs]
        print(MARK + json.dumps({"elapsed_s": round(elapsed, 2), "ok": sum(r.ok for r in results),
                          "peers": {h: sorted(map(list, r.peers)) for h, r in zip(hashes, results, strict=True)},
                          "paced_lookups": source.paced_lookups}))


def burst(swarm, parts: list[list[str]], rate: float) -> dict:
    """``parts[i]``: the hashes of process i, all starting at one instant; what the swarm saw."""
    from tests.test_dht_pacing import BAN_AT, BAN_WINDOW, _drain, _max_in_window

    _drain(swarm)
    start_at = time.time() + 4.0  # every process bootstrapped by then
    procs = [subprocess.Popen([sys.executable, __file__, "--child", json.dumps([swarm.endpoints, part, rate, start_at])],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True) for part in parts]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        if p.returncode != 0:
            raise RuntimeError(f"a lookup process exited {p.returncode}")
        outs.append(json.loads(next(x for x in out.splitlines() if x.startswith(MARK))[len(MARK):]))
    every = [h for part in parts for h in part]
    packets, queries, banned = _drain(swarm, frozenset(every))
    found = {h: {tuple(x) for x in peers} for o in outs for h, peers in o["peers"].items()}
    return {
        "processes": len(parts), "per_node_rate": rate, "lookups": len(every),
        "banned": CRAWLER_IP in banned,
        "worst_packets_per_node_in_10s": max(_max_in_window(sorted(p.get(CRAWLER_IP, [])), BAN_WINDOW) for p in packets),
        "worst_get_peers_per_node_in_10s": max(_max_in_window(sorted(q.get(CRAWLER_IP, [])), BAN_WINDOW)
                                               for q in queries),
        "ban_at_packets_in_10s": BAN_AT,
        "wall_s": max(o["elapsed_s"] for o in outs),
        "lookups_ok": sum(o["ok"] for o in outs),
        "announced_found_exactly": all(found[h] == swarm.expected[h] for h in swarm.expected),
        "paced_lookups": sum(o["paced_lookups"] for o in outs),
    }


def main() -> None:
    """Run the three ways and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lookups", type=int, default=80, help="lookups in the burst (default 80)")
    ap.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        endpoints, hashes, rate, start_at = json.loads(a.child)
        child([tuple(e) for e in endpoints], hashes, rate, start_at)
        return
    import libtorrent as lt

    from crawler.settings import Settings
    from tests.dht_swarm import announced_swarm

    rate = Settings().dht_node_rate
    hashes = hashes_of(a.lookups)
    parts = [hashes[i::a.processes] for i in range(a.processes)]
    extra = {"dht_block_ratelimit": 5, "alert_mask": lt.alert.category_t.dht_log_notification,
             "alert_queue_size": 200_000}
    out: dict = {"lookups": a.lookups, "processes": a.processes, "default_per_node_rate": rate,
                 "libtorrent": lt.__version__, "ways": {}}
    t0 = time.monotonic()
    # A fresh swarm per way: a ban lasts 5 minutes, so one way's ban would spoil the next.
    for name, ps, r in (("one_node", [hashes], rate), ("node_per_process_split", parts, rate / a.processes),
                        ("node_per_process_unsplit", parts, rate)):
        with announced_swarm(size=12, first_ip=70, node_extra=extra) as swarm:
            out["ways"][name] = burst(swarm, ps, r)
        print(f"bench_dht_processes: {name} done", file=sys.stderr)
    out["bench_seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
