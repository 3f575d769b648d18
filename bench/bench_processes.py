"""Visits/s and CPU per visit of ``peercrawl worker --processes N``, against one Redis and a cluster.

Usage: python bench/bench_processes.py [--quick] [--processes 1,2] [--only single,cluster-3]
                                       [--torrents N] [--rounds R] [--concurrency 32]

The workload is bench_cluster's (its pieces, and bench_worker's, are
imported, not copied): opentracker with N torrents of 50 peers each, every
peer address in four swarms and placed in four countries by a test City
database, a StatHat sink in its own process, trackers only (no DHT). For
each topology (``single``: one plain redis-server; ``cluster-3``: a Redis
Cluster of three masters, the crawl in 12 queue shards) and each process
count, one real ``python -m crawler worker --processes N`` (the supervisor
and its N children, as an operator starts it) runs two phases on a fresh
topology: first visits (every peer new), then revisits (every peer known).
Each phase releases every torrent at one instant and ends when the last is
back in cooling (bench_cluster.release_at / visited_since), so start-up and
shutdown are outside every figure.

Per run and phase, each by its own clock:

- visits/s over the phase;
- the worker processes' CPU per visit (the supervisor and every child, user
  + system, psutil);
- each Redis master's CPU per visit (INFO cpu), their sum and the hottest
  master's;
- the bytes Redis received and sent per visit (INFO stats, every node):
  the network between the workers and Redis;
- opentracker's and the StatHat sink's CPU per visit: what the model leaves
  out, because on a real deployment they are on other machines;
- ``cores_busy``: all of the above per second of the phase. When it is near
  the machine's cores, visits/s is bound by the machine (contention), not by
  the crawl: the CPU per visit is then the figure to read.

The summary gives, per topology, the medians over rounds and each process
count's visits/s and CPU per visit against one process's. Prints JSON;
``--processes`` takes ``auto`` as the worker does (one per usable core), so
the same command measures a bigger machine unchanged.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_cluster as bc
import bench_worker as bw
from cluster_nodes import Topology

from crawler import logs
from crawler.queue.queue import Queue
from crawler.registry.worker_registry import WorkerRegistry
from crawler.store import connect as store
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import OpenTracker
from tests.stathat_sink import StatHatSinkProcess
from workers.cpus import usable_cpus

TOPOLOGIES = {"single": (None, 1), "cluster-3": (3, 12)}  # name -> (masters, queue shards)


class Supervised:
    """One ``peercrawl worker --processes n``: the supervisor and its children; stderr in ``log``."""

    def __init__(self, n: int, env: dict, log: Path):
        self.n, self.log = n, log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--processes", str(n)],
                                         env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        """CPU seconds (user + system) of the supervisor and every child so far."""
        total = 0.0
        for p in [self.ps, *self.ps.children(recursive=True)]:
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system
        return total

    def check(self) -> None:
        """Raise, with the end of its log, if the supervisor has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM the supervisor (it drains every child) and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(45)
        except subprocess.TimeoutExpired:
            for p in self.ps.children(recursive=True):
                p.kill()
            self.proc.kill()
            self.proc.wait()


def own_cpu(procs: list[psutil.Process]) -> float:
    """CPU seconds of ``procs`` so far (opentracker, the sink)."""
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def net_bytes(tp: Topology) -> int:
    """Bytes every Redis node received and sent so far (INFO stats): the crawl's network to Redis."""
    total = 0
    for c in tp.nodes.values():
        st = c.info("stats")
        total += int(st["total_net_input_bytes"]) + int(st["total_net_output_bytes"])
    return total


def wait_registered(client, keys, workers: Supervised, seconds: float = 90.0) -> None:
    """Until every child has registered its heartbeat (it then finds nothing due and sleeps)."""
    registry = WorkerRegistry(client, keys.home)
    end = time.monotonic() + seconds
    while len(registry.live(time.time())) < workers.n:
        workers.check()
        if time.monotonic() > end:
            raise RuntimeError("the worker processes did not register")
        time.sleep(0.1)
    time.sleep(0.5)


def phase(tp: Topology, client, keys, workers: Supervised, others: list[psutil.Process], n: int) -> dict:
    """Release every torrent at one instant; figures until the last is visited."""
    at = time.time() + bc.LEAD
    if (released := bc.release_at(client, keys, at)) != n:
        raise RuntimeError(f"{released} torrents cooling, expected {n}")
    time.sleep(max(0.0, at - time.time() - 0.2))
    r0, w0, o0, b0 = bc.cpu(tp), workers.cpu(), own_cpu(others), net_bytes(tp)
    start = time.monotonic() + (at - time.time())
    deadline = time.monotonic() + max(120.0, n / 20)
    while (done := bc.visited_since(client, keys, at)) < n:
        if time.monotonic() > deadline:
            workers.check()
            raise RuntimeError(f"{done} of {n} torrents visited in time")
        time.sleep(bc.POLL)
    span = time.monotonic() - start
    r1, w1, o1, b1 = bc.cpu(tp), workers.cpu(), own_cpu(others), net_bytes(tp)
    per_node = {port: round(1000 * (r1[port] - r0[port]) / n, 4) for port in tp.ports}
    busy = (sum(r1.values()) - sum(r0.values()) + (w1 - w0) + (o1 - o0)) / span
    return {"visits": n, "seconds": round(span, 2), "visits_per_s": round(n / span, 1),
            "workers_cpu_ms_per_visit": round(1000 * (w1 - w0) / n, 4),
            "redis_cpu_ms_per_visit": round(sum(per_node.values()), 4),
            "redis_cpu_ms_per_visit_per_node": per_node,
            "redis_cpu_ms_per_visit_hottest_node": max(per_node.values()),
            "tracker_and_sink_cpu_ms_per_visit": round(1000 * (o1 - o0) / n, 4),
            "redis_network_bytes_per_visit": round((b1 - b0) / n),
            "cores_busy": round(busy, 2)}


def run(name: str, processes: int, a, hashes: list[str], ot, sink, db, tmp: Path) -> dict:
    """The two phases on a fresh ``name`` topology with ``processes`` worker processes."""
    masters, shards = TOPOLOGIES[name]
    with Topology(masters) as tp:
        client = store.connect(bw.settings_for(tp.url, bc.NAMESPACE, tmp, ot, sink, db))
        keys = layout.resolve(client, bc.NAMESPACE, shards)
        s = bw.settings_for(tp.url, bc.NAMESPACE, tmp, ot, sink, db, revisit_seconds=bc.REVISIT, queue_shards=shards)
        Queue(client, keys, s).add([NewItem(h) for h in hashes], now=time.time() + 600)
        env = bc.worker_env(tp.url, shards, ot, sink, db, tmp, a.concurrency)
        workers = Supervised(processes, env, tmp / "logs" / f"{name}-{processes}-{time.time():.0f}.log")
        others = [psutil.Process(ot.proc.pid), psutil.Process(sink.proc.pid)]
        try:
            wait_registered(client, keys, workers)
            first = phase(tp, client, keys, workers, others, len(hashes))
            revisits = phase(tp, client, keys, workers, others, len(hashes))
        finally:
            workers.stop()
        ok, failed = bc.visit_totals(client, keys)
        client.close()
        return {"topology": name, "processes": processes, "masters": masters, "shards": keys.shards,
                "first_visits": first, "revisits": revisits, "visits_recorded": ok, "visits_failed": failed,
                "supervisor_exit": workers.proc.returncode}


FIGURES = ("visits_per_s", "workers_cpu_ms_per_visit", "redis_cpu_ms_per_visit", "redis_cpu_ms_per_visit_hottest_node",
           "tracker_and_sink_cpu_ms_per_visit", "redis_network_bytes_per_visit", "cores_busy")


def summary(runs: list[dict], counts: list[int]) -> dict:
    """Per topology and phase: each process count's medians, and its ratios to the first count's."""
    out: dict = {}
    for name in dict.fromkeys(r["topology"] for r in runs):
        out[name] = {}
        for ph in ("first_visits", "revisits"):
            rows = {}
            for n in counts:
                rs = [r[ph] for r in runs if r["topology"] == name and r["processes"] == n]
                rows[n] = {f: bc.med([r[f] for r in rs]) for f in FIGURES}
            base = rows[counts[0]]
            for n in counts[1:]:
                rows[n]["vs_processes_" + str(counts[0])] = {
                    f: bw.ratio(rows[n][f], base[f], 3) for f in FIGURES if f != "cores_busy"}
            out[name][ph] = rows
    return out


def main() -> None:
    """Run the benchmark and print its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 torrents, one round")
    ap.add_argument("--processes", default="1,2", help="comma-separated process counts, 'auto' allowed (default 1,2)")
    ap.add_argument("--only", default="single,cluster-3", help=f"topologies, of {', '.join(TOPOLOGIES)}")
    ap.add_argument("--torrents", type=int, help="torrents (default 2,000 quick, 6,000 full)")
    ap.add_argument("--rounds", type=int, help="runs of every configuration (default 1 quick, 2 full)")
    ap.add_argument("--concurrency", type=int, default=bc.CONCURRENCY,
                    help=f"visits at a time per process (default {bc.CONCURRENCY}, as bench_cluster)")
    ap.add_argument("--overlap", type=int, default=4, help="swarms each peer address is in (default 4)")
    a = ap.parse_args()
    counts = [usable_cpus() if x.strip() == "auto" else int(x) for x in a.processes.split(",")]
    names = a.only.split(",")
    if unknown := set(names) - set(TOPOLOGIES):
        ap.error(f"--only: unknown topology {', '.join(sorted(unknown))}")
    logs.configure("warning", "json")
    n = a.torrents or (2000 if a.quick else 6000)
    rounds = a.rounds or (1 if a.quick else 2)
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-processes-"))
    db = write_city_db(tmp / "city.mmdb", bw.PLACES)
    hashes = bw.hashes_for("p", n)
    out: dict = {
        "mode": "quick" if a.quick else "full", "torrents": n, "peers_per_swarm": bw.SWARM, "processes": counts,
        "concurrency_per_process": a.concurrency, "rounds": rounds,
        "machine": {"cpu_count": os.cpu_count(), "usable_cpus": usable_cpus(), "redis": bc.redis_version(),
                    "python": sys.version.split()[0],
                    "note": "the workers, opentracker, the sink and every Redis node share these cores: "
                            "read each one's CPU per visit, and cores_busy for how bound the machine was"},
    }
    ot = OpenTracker(tmp / "ot", hashes).start()
    sink = StatHatSinkProcess()
    runs: list[dict] = []
    configs = [(name, c) for name in names for c in counts]
    try:
        out["peer_addresses"] = bw.populate(ot, hashes, a.overlap)
        for r in range(rounds):
            for name, c in (configs if r % 2 == 0 else configs[::-1]):
                runs.append(run(name, c, a, hashes, ot, sink, db, tmp))
                print(f"bench_processes: {name} x{c} done", file=sys.stderr)
    except BaseException:
        print(f"bench_processes failed; the workers' logs are kept in {tmp / 'logs'}", file=sys.stderr)
        raise
    finally:
        sink.close()
        ot.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    out["summary"] = summary(runs, counts)
    out["runs"] = runs
    out["bench_seconds"] = round(time.monotonic() - t_start, 1)
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
