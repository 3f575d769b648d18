"""Redis CPU per visit on each node of a Redis Cluster of 1, 3 and 6 masters, against one Redis.

Usage: python bench/bench_cluster.py [--quick] [--workers 2] [--concurrency 64] [--shards 12]
                                     [--torrents N] [--rounds R] [--mark-buckets B]

The same workload on each topology, each started fresh on loopback
(bench/cluster_nodes.py: Debian's redis-server, persistence off, masters
only, equal contiguous slot ranges):

- ``single``: one plain redis-server, a new crawl's default layout (one
  shard: every key under one hash tag), the baseline of every ratio;
- ``single-sharded``: the same server with the crawl in ``--shards`` shards,
  so the cost of sharding shows apart from the cost of the cluster;
- ``cluster-1``, ``cluster-3``, ``cluster-6``: Redis Cluster with that many
  masters, the crawl in ``--shards`` shards (a multiple of every master
  count, so each master holds as many shards).

The workload is bench_worker's (its pieces are imported, not copied):
opentracker with N torrents of 50 peers each, every peer address in four
swarms and placed in four countries by a test City database, a StatHat sink
in its own process. ``--workers`` real worker processes (``python -m crawler
worker``, trackers only, no DHT): processes, not in-process ``Process``
objects, because production runs one process per core, each with its own
cluster client and connections to every node, and because W processes in
one interpreter would share one core. Each topology runs two phases:

- first visits (every peer new), then revisits (every peer known) by the same
  processes; revisit and retry intervals are an hour, so a phase visits each
  torrent once;
- a phase starts at one instant for every worker: the torrents wait in the
  due queue (``cooling``) until a time set once every worker is idle, and an
  idle worker sleeps exactly until the first due time (workers/worker.py), so
  process start-up is outside every figure. It ends when the last torrent is
  back in cooling (polled every 50 ms: ZCOUNT per shard).

Per topology and phase: visits/s; per node, Redis CPU (INFO cpu, user + sys)
per visit in ms, its busiest commands per visit (INFO commandstats: calls
and microseconds), which queue shards it holds and whether it holds the
namespace's home tag (what a node holds explains why it is hot); the
workers' CPU per visit (psutil), and each node's idle CPU (1 s before the
workload: the cluster's own chatter). Per cluster: each node's CPU per
visit as a share of the single node's, against the target 1.3 / masters;
the cluster's total against the single node's; visits/s against the single
node's (target >= 0.8). Memory, summed over masters: ``used_memory`` less
client buffers, the script cache and the cluster bus links, after adding
and after each phase, per torrent; and MEMORY USAGE of every key by kind
(queue, counter indexes, mark buckets, StatHat outbox, home; any other key
by its name's first part), so bytes per mark record come from the buckets
alone. Prints JSON; every ratio is against the ``single`` run of the same
invocation (with ``--rounds`` > 1, medians over rounds, the topologies'
order alternating).

On a 2-core machine the workers, opentracker and up to six Redis processes
share the cores: visits/s is bound by CPU and says more about the machine
than about the cluster; the per-node CPU per visit is the figure to read.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil
from redis.crc import key_slot

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_worker as bw
from cluster_nodes import Topology

from crawler import logs
from crawler.counters.marks import RECORD
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.registry.worker_registry import WorkerRegistry
from crawler.store import connect as store
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import OpenTracker
from tests.stathat_sink import StatHatSinkProcess

NAMESPACE = "bench-cluster"
# One hour: a phase visits each torrent once, and a visited torrent's due
# time (visit + REVISIT) tells it from one waiting for the phase's start.
REVISIT = 3600.0
# A phase's start is set this far ahead: more than an idle worker's longest
# sleep (workers.worker.IDLE_POLL[1], 2 s), so every worker wakes for it.
LEAD = 2.5
# The workers' fingerprint key (any; every worker of a crawl has the same).
SECRET = "bench-secret-0123456789"
POLL = 0.05
# Visits at a time per worker. Not bench_worker's 64: on a cluster, the
# worker's client is redis-py's cluster client as it is (workers/connections.py
# gives only a single server's client the blocking pool), whose pool per node
# raises MaxConnectionsError past 100 connections; at 64 a worker on a cluster
# fails visits with it (their torrents wait for their leases to expire).
CONCURRENCY = 32
# (name, masters or None for one plain server, sharded?)
TOPOLOGIES = [("single", None, False), ("single-sharded", None, True), ("cluster-1", 1, True),
              ("cluster-3", 3, True), ("cluster-6", 6, True)]
TARGET_SHARE = 1.3
TARGET_RATE = 0.8
# Kinds of keys, by the first part of a key's name after its hash tag
# (keys.RESERVED); any other part is reported as itself, and every part
# apart as well (``memory_usage_by_part_bytes``).
QUEUE = {"ready", "since", "cooling", "leases", "evicted", "tombstones", "held", "claims", "expiries",
         "quarantined", "quarantine", "t", "tr", "vh", "visits", "failedvisits", "mi"}
HOME = {"workers", "w", "trackerhealth", "trackerused", "geoerrors", "announceport", "secret", "layout"}
KINDS = {"mk": "marks", "ix": "counters", "sh": "stathat"}


def kind_of(part: str) -> str:
    """The kind of a key whose first part (after the hash tag) is ``part``."""
    if part in QUEUE:
        return "queue"
    if part in HOME:
        return "home"
    return KINDS.get(part, part)


# --- per node ----------------------------------------------------------------------
def cpu(tp: Topology) -> dict[int, float]:
    """Each node's Redis CPU seconds (user + sys) so far."""
    return {port: bw.redis_cpu(c) for port, c in tp.nodes.items()}


def data_memory(tp: Topology) -> dict[int, int]:
    """Each node's used_memory less client buffers and the script cache: the data and its indexes."""
    out = {}
    for port, c in tp.nodes.items():
        m = c.info("memory")
        out[port] = (int(m["used_memory"]) - int(m["mem_clients_normal"]) - int(m["used_memory_scripts"])
                     - int(m.get("mem_cluster_links", 0)))
    return out


def commands(tp: Topology) -> dict[int, dict[str, tuple[int, int]]]:
    """Each node's commands so far: name -> (calls, microseconds)."""
    out = {}
    for port, c in tp.nodes.items():
        out[port] = {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
                     for k, v in c.info("commandstats").items()}
    return out


def top_commands(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]], n: int, top: int = 6) -> dict:
    """The ``top`` commands by time between ``a`` and ``b``: name -> [calls per visit, µs per visit]."""
    d = {k: (calls - a.get(k, (0, 0))[0], usec - a.get(k, (0, 0))[1]) for k, (calls, usec) in b.items()}
    best = sorted((x for x in d.items() if x[1][0] > 0), key=lambda x: -x[1][1])[:top]
    return {k: [round(calls / n, 3), round(usec / n, 2)] for k, (calls, usec) in best}


def placement(tp: Topology, keys: Keys) -> dict[int, dict]:
    """Which queue shards, and whether the home tag, each node holds."""
    out = {port: {"queue_shards": [], "home": False} for port in tp.ports}
    for i, k in enumerate(keys.all_shards):
        out[tp.owner(key_slot(k.prefix.encode()))]["queue_shards"].append(i)
    out[tp.owner(key_slot(keys.home.prefix.encode()))]["home"] = True
    return out


def memory_by_kind(tp: Topology, keys: Keys) -> dict:
    """MEMORY USAGE of every key of the namespace, per kind, over every node; and the mark records."""
    by_kind: dict[str, int] = defaultdict(int)
    by_part: dict[str, int] = defaultdict(int)
    per_node: dict[int, dict[str, int]] = {}
    buckets = records = 0
    for port, c in tp.nodes.items():
        node: dict[str, int] = defaultdict(int)
        names = list(dict.fromkeys(c.scan_iter(match=keys.match_all, count=1000)))  # SCAN may repeat a key
        p = c.pipeline(transaction=False)
        for name in names:
            p.memory_usage(name, samples=0)
        sizes = p.execute() if names else []
        parts = [name.split(b"}:", 1)[1].split(b":") for name in names]
        marks = [name for name, ps in zip(names, parts, strict=True) if ps[0] == b"mk" and ps[1] != b"sweep"]
        p = c.pipeline(transaction=False)
        for name in marks:
            p.strlen(name)
        buckets += len(marks)
        records += sum(p.execute() if marks else []) // RECORD
        for ps, size in zip(parts, sizes, strict=True):
            first = ps[0].decode()
            node[kind_of(first)] += size or 0
            by_kind[kind_of(first)] += size or 0
            by_part[first] += size or 0
        per_node[port] = dict(node)
    return {"bytes": dict(by_kind), "bytes_by_part": dict(by_part), "bytes_per_node": per_node,
            "mark_buckets": buckets, "mark_records": records}


# --- the workers ---------------------------------------------------------------------
def worker_env(url: str, shards: int, ot: OpenTracker, sink: StatHatSinkProcess, db: Path, tmp: Path, concurrency: int,
               mark_buckets: int | None = None) -> dict:
    """The environment of ``peercrawl worker`` for one topology (``mark_buckets``: the crawl's
    ``PEERCRAWL_MARK_BUCKETS``; None: the default)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PEERCRAWL_", "STATHAT_", "GEOIP_")) and k != "REDIS_URL"}
    env.update(
        REDIS_URL=url, PEERCRAWL_NAMESPACE=NAMESPACE, PEERCRAWL_QUEUE_SHARDS=str(shards),
        PEERCRAWL_DATA_DIR=str(tmp / "data"), PEERCRAWL_TRACKERS=f"{ot.udp_url}|200", PEERCRAWL_DHT="off",
        PEERCRAWL_ALLOW_PRIVATE="1", PEERCRAWL_SECRET=SECRET,
        GEOIP_DB=str(db), STATHAT_EZKEY="bench", STATHAT_URL=sink.url, PEERCRAWL_REVISIT_SECONDS=str(REVISIT),
        PEERCRAWL_RETRY_SECONDS=str(REVISIT), PEERCRAWL_CONCURRENCY=str(concurrency),
        PEERCRAWL_LOG_LEVEL="warning", PEERCRAWL_LOG_FORMAT="json",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    if mark_buckets is not None:
        env["PEERCRAWL_MARK_BUCKETS"] = str(mark_buckets)
    return env


class Workers:
    """``count`` worker processes; their stderr in ``logs``."""

    def __init__(self, count: int, env: dict, logs_dir: Path):
        logs_dir.mkdir(parents=True, exist_ok=True)
        self.logs = [logs_dir / f"worker-{i}.log" for i in range(count)]
        self.procs = []
        for path in self.logs:
            with path.open("wb") as err:
                self.procs.append(subprocess.Popen([sys.executable, "-m", "crawler", "worker"], env=env,
                                                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err))
        self.ps = [psutil.Process(p.pid) for p in self.procs]

    def cpu(self) -> float:
        """The workers' CPU seconds (user + sys) so far."""
        return sum(t.user + t.system for t in (p.cpu_times() for p in self.ps))

    def check(self) -> None:
        """Raise, with the end of its log, if a worker has exited."""
        for proc, path in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode}: {path.read_text()[-2000:]}")

    def warnings(self) -> dict[str, int]:
        """The workers' log lines by event (they log at warning and above only)."""
        out: dict[str, int] = defaultdict(int)
        for path in self.logs:
            for line in path.read_text().splitlines():
                try:
                    out[json.loads(line).get("event", "?")] += 1
                except ValueError:
                    out["(not JSON)"] += 1
        return dict(out)

    def stop(self) -> None:
        """SIGTERM every worker (each finishes its visits and flushes) and wait for them."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_registered(client, keys: Keys, workers: Workers, seconds: float = 90.0) -> None:
    """Until every worker has registered its heartbeat (it then claims, finds nothing due and sleeps)."""
    registry = WorkerRegistry(client, keys.home)
    end = time.monotonic() + seconds
    while len(registry.live(time.time())) < len(workers.procs):
        workers.check()
        if time.monotonic() > end:
            raise RuntimeError("the workers did not register")
        time.sleep(0.1)
    time.sleep(0.5)


# --- a phase ---------------------------------------------------------------------------
def release_at(client, keys: Keys, at: float) -> int:
    """Every cooling torrent due at ``at`` (unix time); returns how many."""
    n = 0
    for k in keys.all_shards:
        members = client.zrange(k.cooling, 0, -1)
        if members:
            client.zadd(k.cooling, dict.fromkeys(members, at), xx=True)
            n += len(members)
    return n


def visited_since(client, keys: Keys, at: float) -> int:
    """Torrents visited after ``at``: back in cooling, due a revisit interval later."""
    p = client.pipeline(transaction=False)
    for k in keys.all_shards:
        p.zcount(k.cooling, at + REVISIT / 2, "+inf")
    return sum(p.execute())


def phase(tp: Topology, client, keys: Keys, workers: Workers, n: int) -> dict:
    """Release every torrent at one instant; figures until the last is visited."""
    at = time.time() + LEAD
    released = release_at(client, keys, at)
    if released != n:
        raise RuntimeError(f"{released} torrents cooling, expected {n}")
    time.sleep(max(0.0, at - time.time() - 0.2))
    c0, w0, k0 = cpu(tp), workers.cpu(), commands(tp)
    start = time.monotonic() + (at - time.time())
    deadline = time.monotonic() + max(120.0, n / 20)
    while (done := visited_since(client, keys, at)) < n:
        if time.monotonic() > deadline:
            workers.check()
            raise RuntimeError(f"{done} of {n} torrents visited in time")
        time.sleep(POLL)
    span = time.monotonic() - start
    c1, w1, k1 = cpu(tp), workers.cpu(), commands(tp)
    per_node = {port: round(1000 * (c1[port] - c0[port]) / n, 4) for port in tp.ports}
    return {"visits": n, "seconds": round(span, 2), "visits_per_s": round(n / span, 1),
            "redis_cpu_ms_per_visit": round(sum(per_node.values()), 4),
            "redis_cpu_ms_per_visit_per_node": per_node,
            "workers_cpu_ms_per_visit": round(1000 * (w1 - w0) / n, 3),
            "top_commands_per_node_per_visit": {port: top_commands(k0[port], k1[port], n) for port in tp.ports}}


def visit_totals(client, keys: Keys) -> tuple[int, int]:
    """Visits completed and failed, summed over the per-minute counts of every shard."""
    ok = failed = 0
    for k in keys.all_shards:
        ok += sum(int(v) for v in client.hgetall(k.visits).values())
        failed += sum(int(v) for v in client.hgetall(k.failed_visits).values())
    return ok, failed


def run_topology(name: str, masters: int | None, shards: int, a, hashes: list[str], ot, sink, db, tmp: Path) -> dict:
    """The whole workload on one fresh topology."""
    with Topology(masters, cpus=a.redis_cpus) as tp:
        client = store.connect(bw.settings_for(tp.url, NAMESPACE, tmp, ot, sink, db))
        keys = layout.resolve(client, NAMESPACE, shards, a.mark_buckets)
        s = bw.settings_for(tp.url, NAMESPACE, tmp, ot, sink, db, revisit_seconds=REVISIT, queue_shards=shards)
        c0 = cpu(tp)
        time.sleep(1.0)
        c1 = cpu(tp)
        idle = {port: round(1000 * (c1[port] - c0[port]), 2) for port in tp.ports}
        mem = [data_memory(tp)]
        # Added due far ahead: waiting in cooling until the first phase releases them.
        Queue(client, keys, s).add([NewItem(h) for h in hashes], now=time.time() + 600)
        mem.append(data_memory(tp))
        workers = Workers(a.workers, worker_env(tp.url, shards, ot, sink, db, tmp, a.concurrency, a.mark_buckets),
                          tmp / "logs" / f"{name}-{time.time():.0f}")
        try:
            wait_registered(client, keys, workers)
            first = phase(tp, client, keys, workers, len(hashes))
            mem.append(data_memory(tp))
            revisits = phase(tp, client, keys, workers, len(hashes))
            mem.append(data_memory(tp))
        finally:
            workers.stop()
        mem.append(data_memory(tp))
        warnings = workers.warnings()
        ok, failed = visit_totals(client, keys)
        kinds = memory_by_kind(tp, keys)
        client.close()
        return {"masters": masters, "shards": keys.shards, "ports": tp.ports,
                "placement": placement(tp, keys), "idle_redis_cpu_ms_per_s_per_node": idle,
                "first_visits": first, "revisits": revisits, "visits_recorded": ok, "visits_failed": failed,
                "worker_log_events": warnings,
                "memory": memory(mem, kinds, len(hashes))}


def memory(mem: list[dict[int, int]], kinds: dict, n: int) -> dict:
    """Bytes from the snapshots (before add, after add, after each phase, workers gone) and the key scan."""
    total = [sum(m.values()) for m in mem]
    marks = kinds["bytes"].get("marks", 0)
    records = kinds["mark_records"]
    return {
        "used_memory_delta_bytes": {"after_add": total[1] - total[0], "after_first_visits": total[2] - total[0],
                                    "after_revisits": total[3] - total[0], "workers_gone": total[4] - total[0]},
        "bytes_per_torrent_added": round((total[1] - total[0]) / n, 1),
        "bytes_per_tracked_torrent_all_in": round((total[4] - total[0]) / n, 1),
        "bytes_per_tracked_torrent_without_marks": round((total[4] - total[0] - marks) / n, 1),
        "memory_usage_by_kind_bytes": kinds["bytes"],
        "memory_usage_by_kind_per_torrent": {k: round(v / n, 1) for k, v in kinds["bytes"].items()},
        "mark_buckets": kinds["mark_buckets"], "mark_records": records,
        "mark_records_per_bucket": round(records / max(kinds["mark_buckets"], 1), 2),
        "bytes_per_mark_record": round(marks / max(records, 1), 1),
        "memory_usage_by_kind_per_node": kinds["bytes_per_node"],
        "memory_usage_by_part_bytes": kinds["bytes_by_part"],
    }


# --- the report -----------------------------------------------------------------------
def med(xs):
    """The median of ``xs``, to 4 places (None when empty)."""
    return round(statistics.median(xs), 4) if xs else None


def summary(runs: dict[str, list[dict]]) -> dict:
    """Per topology, its figures against ``single``: CPU shares per node, visits/s, memory."""
    base = runs["single"]
    out = {}
    for name, rs in runs.items():
        row: dict = {}
        for ph in ("first_visits", "revisits"):
            rate = med([r[ph]["visits_per_s"] for r in rs])
            total = med([r[ph]["redis_cpu_ms_per_visit"] for r in rs])
            b_rate = med([r[ph]["visits_per_s"] for r in base])
            b_total = med([r[ph]["redis_cpu_ms_per_visit"] for r in base])
            nodes = [med(x) for x in zip(*(sorted(r[ph]["redis_cpu_ms_per_visit_per_node"].values(), reverse=True)
                                           for r in rs), strict=True)]
            masters = rs[0]["masters"] or 1
            shares = [round(x / b_total, 3) for x in nodes]
            hottest = [max(r[ph]["redis_cpu_ms_per_visit_per_node"].items(), key=lambda x: x[1])[0] for r in rs]
            row[ph] = {
                "hottest_node_holds": [r["placement"][port] for r, port in zip(rs, hottest, strict=True)],
                "visits_per_s": rate, "visits_per_s_vs_single": bw.ratio(rate, b_rate, 3),
                "target_visits_per_s_vs_single": TARGET_RATE,
                "redis_cpu_ms_per_visit_total": total, "total_vs_single": bw.ratio(total, b_total, 3),
                "redis_cpu_ms_per_visit_per_node_hottest_first": nodes,
                "node_share_of_single_hottest_first": shares,
                "target_node_share": round(TARGET_SHARE / masters, 3),
                "node_share_target_met": shares[0] <= TARGET_SHARE / masters,
                "visits_per_s_target_met": rate / b_rate >= TARGET_RATE,
                "workers_cpu_ms_per_visit": med([r[ph]["workers_cpu_ms_per_visit"] for r in rs]),
            }
        m = [r["memory"] for r in rs]
        row["memory"] = {k: med([x[k] for x in m]) for k in (
            "bytes_per_torrent_added", "bytes_per_tracked_torrent_all_in", "bytes_per_tracked_torrent_without_marks",
            "bytes_per_mark_record", "mark_records_per_bucket")}
        out[name] = row
    return out


def main() -> None:
    """Run the benchmark and print its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 torrents, one round (~2.5 minutes)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY,
                    help=f"visits at a time per worker (default {CONCURRENCY})")
    ap.add_argument("--shards", type=int, default=12, help="queue shards of the sharded runs (default 12)")
    ap.add_argument("--torrents", type=int, help="torrents (default 2,000 quick, 6,000 full)")
    ap.add_argument("--rounds", type=int, help="runs of every topology (default 1 quick, 2 full)")
    ap.add_argument("--overlap", type=int, default=4, help="swarms each peer address is in (default 4)")
    ap.add_argument("--mark-buckets", type=int,
                    help="the crawl's PEERCRAWL_MARK_BUCKETS (default: the worker's): fewer fill each bucket more, "
                         "as a crawl of millions of torrents does (a mark record's bytes depend on it)")
    ap.add_argument("--pin", action="store_true",
                    help="every Redis node on the last core, everything else on the others (needs 2+ cores): "
                         "the nodes then compete only with each other")
    ap.add_argument("--only", help="comma-separated topologies to run besides single, the baseline "
                                    f"(of {', '.join(t[0] for t in TOPOLOGIES[1:])}; default all)")
    a = ap.parse_args()
    topologies = TOPOLOGIES
    if a.only:
        wanted = {"single", *a.only.split(",")}
        unknown = wanted - {t[0] for t in TOPOLOGIES}
        if unknown:
            ap.error(f"--only: unknown topology {', '.join(sorted(unknown))}")
        topologies = [t for t in TOPOLOGIES if t[0] in wanted]
    a.redis_cpus = None
    if a.pin:
        cores = sorted(os.sched_getaffinity(0))
        a.redis_cpus = {cores[-1]}
        os.sched_setaffinity(0, set(cores[:-1]))  # the workers, opentracker and the sink inherit it
    logs.configure("warning", "json")
    n = a.torrents or (2000 if a.quick else 6000)
    rounds = a.rounds or (1 if a.quick else 2)
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    db = write_city_db(tmp / "city.mmdb", bw.PLACES)
    hashes = bw.hashes_for("c", n)
    out: dict = {
        "mode": "quick" if a.quick else "full", "torrents": n, "peers_per_swarm": bw.SWARM,
        "workers": a.workers, "concurrency_per_worker": a.concurrency, "shards_when_sharded": a.shards,
        "rounds": rounds, "mark_buckets": a.mark_buckets, "redis_pinned_to_cpus": sorted(a.redis_cpus) if a.redis_cpus else None,
        "machine": {"cpu_count": os.cpu_count(), "redis": redis_version(),
                    "python": sys.version.split()[0],
                    "note": "workers, opentracker, the StatHat sink and every Redis node share these cores: "
                            "visits/s is CPU-bound here; the per-node Redis CPU per visit is the main figure"},
        "redis_config": "persistence off (--save '' --appendonly no), noeviction; clusters: masters only, "
                        "equal contiguous slot ranges (CLUSTER ADDSLOTSRANGE), no replicas",
    }
    ot = OpenTracker(tmp / "ot", hashes).start()
    sink = StatHatSinkProcess()
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in topologies}
    try:
        out["peer_addresses"] = bw.populate(ot, hashes, a.overlap)
        for r in range(rounds):
            order = topologies if r % 2 == 0 else topologies[::-1]
            for name, masters, sharded in order:
                runs[name].append(run_topology(name, masters, a.shards if sharded else 1, a, hashes, ot, sink, db, tmp))
    except BaseException:
        print(f"bench_cluster failed; the workers' logs are kept in {tmp / 'logs'}", file=sys.stderr)
        raise
    finally:
        sink.close()
        ot.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    out["summary"] = summary(runs)
    out["runs"] = runs
    out["bench_seconds"] = round(time.monotonic() - t_start, 1)
    print(json.dumps(out, indent=2, ensure_ascii=False))


def redis_version() -> str:
    """The redis-server binary's version line."""
    p = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False)
    return p.stdout.strip()


if __name__ == "__main__":
    main()
