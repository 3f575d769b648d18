"""Visits per second of one worker process, against a btstat-like baseline, on loopback.

Usage: python bench/bench_worker.py [--quick] [--redis-url redis://127.0.0.1:6379/0]
                                    [--concurrency 64] [--overlap 4]

Starts opentracker with N torrents whose swarms hold 50 peers each, a local
StatHat sink (its own process, as StatHat is) and, for the DHT runs, a
10-node libtorrent swarm. Each swarm's peers are distinct loopback addresses
(127.2.x.y) placed in four countries by a small City database; an address is
in ``--overlap`` swarms (a real peer is in a few swarms, not in all of them).
Then, in this one process (gevent patched first, as the worker command does):

- worker, trackers only: first visits (every peer new), then revisits (every
  peer known);
- worker with the DHT as well, first visits and revisits (fewer torrents: a
  lookup waits ~2 s for the traversal to settle);
- per run: visits/s over the visiting span (first claim to last visit; the
  process's start and stop are reported apart), Redis round trips per visit
  (counted at redis-py's send_packed_command) and what they were, Python CPU
  per visit;
- ``--concurrency auto`` twice: on a queue that cannot be drained (revisit
  0.2 s: the pool should settle where the process is saturated) and on a
  paced queue needing about half of the fixed pool's rate (it should settle
  where latency stays near zero). Each prints the pool size over time and
  when it settled ("stable": the size did not change during the last
  ``STABLE_STEPS`` decisions);
- baseline: what btstat did per visit, with the same greenlet count, on the
  same swarms, first visits then revisits: a UDP connect before every
  announce, one Redis command per round trip (claim, dedupe SET NX EX, two
  INCRs per new metric, score), one StatHat POST per increment to the sink.
  It runs a fixed number of visits (a multiple of its greenlets) and is timed
  until the last one ends;
- bare: bench_trackers' bare announce loop (bench_trackers.bench_bare),
  the ceiling for announces on this machine.

Prints JSON with each rate and the ratios worker/baseline on like visits
(target >= 30) and worker/bare.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse
import hashlib
import itertools
import json
import os
import socket
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import redis
from gevent.pool import Pool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_trackers
import swarms
from redis_cpu import redis_cpu

from crawler import logs
from crawler.counters.names import metrics_for, month_of
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.settings import Settings
from crawler.source_settings import TrackerSpec
from crawler.sources.trackers import udp_codec as u
from crawler.torrents.items import NewItem
from geo import Locator
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.opentracker import OpenTracker
from tests.stathat_sink import StatHatSinkProcess
from workers.autoscale import STABLE_STEPS, settled
from workers.connections import worker_client

SWARM = bench_trackers.SWARM
# Swarm peers: address k is 127.2.(64 * (k % 4) + q // 254).(q % 254 + 1), q = k // 4,
# so consecutive addresses take turns in the four places.
PLACES = {
    "127.2.0.0/18": ("Germany", "Berlin", "10115"),
    "127.2.64.0/18": ("Japan", "東京", "100-0001"),
    "127.2.128.0/18": ("Brasil", "São Paulo", "01000-000"),
    "127.2.192.0/18": ("Iceland", None, None),
    "127.0.0.0/24": ("Iceland", None, None),  # the DHT swarm's nodes
}
MAX_ADDRESSES = 4 * 64 * 254
# --concurrency auto's latency target here: the runs last seconds, not hours.
LATENCY_TARGET = 0.5


def address(k: int) -> str:
    """The ``k``-th loopback peer address of the swarms (127.2.x.y, spread over the /16)."""
    q, r = divmod(k, 4)
    return f"127.2.{64 * r + q // 254}.{q % 254 + 1}"


# --- Redis round trips ---------------------------------------------------------
ROUND_TRIPS = [0]
KINDS: Counter = Counter()
# Labelling costs Python time per command: on for the worker runs only (the
# baseline sends hundreds of commands per visit and would pay it hundreds of times).
LABEL = [False]
SCRIPTS: dict[str, str] = {}


def _count_round_trips() -> None:
    """Count every packet redis-py sends (one per round trip) and label it."""
    from crawler.store.scripts import source

    for lua in ROOT.glob("crawler/**/*.lua"):
        package = ".".join(lua.parent.relative_to(ROOT).parts)
        SCRIPTS[hashlib.sha1(source(lua.stem, package).encode("utf-8")).hexdigest()] = lua.stem
    conn = redis.connection.AbstractConnection
    orig_send = conn.send_packed_command

    def counted(self, command, check_health=True):
        ROUND_TRIPS[0] += 1
        return orig_send(self, command, check_health)

    conn.send_packed_command = counted

    def name(args) -> str:
        cmd = str(args[0]).upper() if not isinstance(args[0], bytes) else args[0].decode().upper()
        if cmd == "EVALSHA" and len(args) > 1:
            sha = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
            return "lua:" + SCRIPTS.get(sha, sha[:8])
        return cmd

    orig_exec = redis.Redis.execute_command

    def labelled(self, *args, **options):
        if LABEL[0]:
            KINDS[name(args)] += 1
        return orig_exec(self, *args, **options)

    redis.Redis.execute_command = labelled
    orig_pipe = redis.client.Pipeline.execute

    def pipe_labelled(self, raise_on_error=True):
        if LABEL[0] and self.command_stack:
            names = sorted({name(c[0]) for c in self.command_stack})
            KINDS["pipeline(" + "+".join(names) + ")"] += 1
        return orig_pipe(self, raise_on_error)

    redis.client.Pipeline.execute = pipe_labelled


hashes_for = swarms.hashes_for


def populate(ot: OpenTracker, hashes: list[str], overlap: int) -> int:
    """Give every torrent SWARM distinct peers, each address in ``overlap`` swarms; returns addresses."""
    return swarms.populate(ot, hashes, overlap, address, SWARM, MAX_ADDRESSES)


def settings_for(redis_url, ns, tmp, ot, sink, db, **kw) -> Settings:
    """The worker's settings for one run: this tracker, sink and database, no DHT, ``kw`` on top."""
    base = {"redis_url": redis_url, "namespace": ns, "data_dir": Path(tmp) / "d",
            "trackers": (TrackerSpec(ot.udp_url, 200),), "dht": False, "allow_private": True,
            "secret": "bench-secret-0123456789", "geoip_db": db, "stathat_ezkey": "bench",
            "stathat_url": sink.url}
    base.update(kw)
    return Settings(**base)


class Marks:
    """Counters at one instant, to split a run into phases; ``full`` adds the costly ones
    (Redis's CPU is one more round trip; the labels a copy), taken at phase ends only."""

    def __init__(self, client, worker=None, full: bool = True):
        self.t = time.monotonic()
        self.rt, self.cpu = ROUND_TRIPS[0], time.process_time()
        self.visits = worker.health.visits if worker else 0
        self.failed = worker.health.failed if worker else 0
        self.peers = worker.health.peers if worker else 0
        self.rcpu = redis_cpu(client) if full else None
        self.kinds = Counter(KINDS) if full else None


def phase(a: Marks, b: Marks, b_full: Marks) -> dict:
    """Figures from ``a`` to ``b``; Redis CPU and the labels up to ``b_full`` (taken just after ``b``)."""
    visits = b.visits - a.visits
    per = max(visits, 1)
    kinds = Counter(b_full.kinds)
    kinds.subtract(a.kinds)
    span = max(b.t - a.t, 1e-6)
    return {
        "visits": visits, "failed": b.failed - a.failed, "visits_per_s": round(visits / span, 1),
        "seconds": round(span, 2),
        "round_trips_per_visit": round((b.rt - a.rt) / per, 2),
        "round_trips_by_kind_per_visit": {k: round(v / per, 2) for k, v in kinds.most_common(8) if v > 0},
        "python_cpu_ms_per_visit": round(1000 * (b.cpu - a.cpu) / per, 3),
        "redis_cpu_ms_per_visit": round(1000 * (b_full.rcpu - a.rcpu) / per, 3),  # shared server: others add noise
        "peers_per_visit": round((b.peers - a.peers) / per, 1),
    }


_CLIENTS: dict = {}


def run_worker(s: Settings, client, hashes: list[str], concurrency, split: int | None = None,
               due_now: bool = False, **kw) -> dict:
    """One worker process's run over ``hashes`` (added first); figures per phase.

    ``split``: the visit count that ends the first phase (first visits; the
    rest are revisits by the same process); None: one phase. ``due_now``:
    every cooling torrent is made due first (revisits by a new process).
    Phases end at their last visit; the process's start and its stop after
    the last visit are reported apart (``start_and_stop_s``). The services'
    round trips (heartbeat, flusher, sweep, autoscaler) count: they are part
    of a worker.
    """
    from workers.process import Process, tune_gc

    keys = Keys(s.namespace)
    Queue(client, keys, s).add([NewItem(h) for h in hashes])
    if due_now:
        members = client.zrange(keys.cooling, 0, -1)
        if members:
            client.zadd(keys.cooling, dict.fromkeys(members, time.time() - 1))
    # The client the worker command gives its Process (a blocking pool sized
    # for the greenlets); one for the whole bench, so connections are reused.
    if "wc" not in _CLIENTS:
        _CLIENTS["wc"] = worker_client(client, 256)
    marks: list[tuple[Marks, Marks]] = []
    box: list = []

    def on_visit(v) -> None:
        w = box[0].worker
        box[1] = Marks(client, w, full=False)
        if split is not None and w.health.visits == split:
            marks.append((box[1], Marks(client, w)))

    p = Process(s, _CLIENTS["wc"], keys, concurrency=concurrency, until_idle=kw.pop("until_idle", True),
                on_visit=on_visit, **kw)
    tune_gc()  # as the worker command does
    box[:] = [p, None]
    start = Marks(client)
    LABEL[0] = True
    try:
        p.run(signals=False)
    finally:
        LABEL[0] = False
    end = Marks(client, p.worker)
    last = box[1] or end
    points = [(start, start), *marks, (last, end)]
    out = {"phases": [phase(a[1], b[0], b[1]) for a, b in itertools.pairwise(points)],
           "start_and_stop_s": round(end.t - last.t, 2), "_process": p,
           # visits recorded together (crawler/counters/batcher.py), over the whole run
           "peers_per_recording_batch": round(p.batcher.units / max(1, p.batcher.batches), 1)}
    return out


# --- --concurrency auto ---------------------------------------------------------------
def run_auto(s: Settings, client, hashes: list[str], seconds: float, interval: float) -> dict:
    """A worker with ``--concurrency auto`` for ``seconds``: its visits and where the autoscaler settled."""
    r = run_worker(s, client, hashes, None, until_idle=False, duration=seconds, autoscale_interval=interval,
                   autoscale_options={"latency_target": LATENCY_TARGET})
    a = r["_process"].worker.autoscaler
    hist = a.history
    st = settled(hist)
    return {
        "revisit_s": s.revisit_seconds, "latency_target_s": LATENCY_TARGET, "demand_visits_per_s": round(len(hashes) / s.revisit_seconds, 1),
        "visits_per_s": r["phases"][0]["visits_per_s"], "interval_s": interval, "bounds": [a.low, a.high],
        "stable_definition": f"the size did not change during the last {STABLE_STEPS} decisions",
        "stable": st["stable"], "final_size": st["size"], "settled_after_s": st["since_s"],
        "pool_size_over_time": [[x["t"], x["size"], x["why"]] for x in hist],
        "last_sample": hist[-1] if hist else None,
        "round_trips_per_visit": r["phases"][0]["round_trips_per_visit"],
        "python_cpu_ms_per_visit": r["phases"][0]["python_cpu_ms_per_visit"],
    }


# --- the btstat-like baseline ---------------------------------------------------------
def baseline(client, ns: str, ot: OpenTracker, sink: StatHatSinkProcess, db, hashes: list[str], concurrency: int) -> dict:
    """btstat per visit: connect+announce, one command per round trip, one POST per increment.

    Visits each of ``hashes`` once (``concurrency`` greenlets); timed until the last visit ends.
    """
    k = Keys(ns)
    client.zadd(k.scratch("bq"), dict.fromkeys(hashes, 1.0))
    loc = Locator.open(db)
    month = month_of(time.time())
    done, posts, rts = [0], [0], ROUND_TRIPS[0]
    t0 = time.monotonic()
    cpu0 = time.process_time()

    def post(stat: str) -> None:
        body = json.dumps({"ezkey": "bench", "data": [{"stat": stat, "count": 1}]}).encode()
        req = urllib.request.Request(sink.url, body, {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()
        posts[0] += 1

    def visit() -> None:
        while True:
            popped = client.zpopmax(k.scratch("bq"))
            if not popped:
                return
            h, score = popped[0][0].decode(), popped[0][1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(2)
                dest = ("127.0.0.1", ot.port)
                s.sendto(u.connect_request(7), dest)  # a connect before every announce
                cid = u.parse_reply(s.recv(64)).connection_id
                s.sendto(u.AnnounceRequest(cid, 8, bytes.fromhex(h), os.urandom(20), 55556, 200,
                                           u.EVENT_STARTED, left=1).encode(), dest)
                reply = u.parse_reply(s.recv(65536))
            for ip, _ in reply.peers:
                p = loc.locate(ip)
                for m in metrics_for(h, p.country, p.city, p.postcode):
                    if client.set(k.scratch("bm", m.name, ip), 1, nx=True, ex=30 * 86400):
                        client.incr(k.scratch("bc", m.name))
                        client.incr(k.scratch("bc", m.name, month))
                        if m.family == "countries":
                            post(m.name)
            client.zadd(k.scratch("bs"), {h: score * (0.8 if reply.peers else 0.5)})
            done[0] += 1

    pool = Pool(concurrency)
    for _ in range(concurrency):
        pool.spawn(visit)
    pool.join()
    elapsed = time.monotonic() - t0
    per = max(done[0], 1)
    return {"visits": done[0], "seconds": round(elapsed, 2), "visits_per_s": round(done[0] / elapsed, 2),
            "round_trips_per_visit": round((ROUND_TRIPS[0] - rts) / per, 1),
            "stathat_posts_per_visit": round(posts[0] / per, 1),
            "python_cpu_ms_per_visit": round(1000 * (time.process_time() - cpu0) / per, 2)}


def ratio(a, b, digits=1):
    """``a / b`` rounded, or None when either is missing or zero."""
    return round(a / b, digits) if a and b else None


def rest(a, out: dict, client, tmp, ot, sink, db, hashes: list[str], dht_hashes: list[str], ns) -> None:
    """The runs after the trackers-only ones: the DHT, --concurrency auto, the baseline, the bare loop."""
    n_base = a.concurrency
    auto_seconds = 30.0 if a.quick else 45.0
    auto_interval = 1.0
    from tests.dht_swarm import announced_swarm

    plan = {h: ([i % 10, (i + 3) % 10, (i + 6) % 10], 9000 + 10 * i) for i, h in enumerate(dht_hashes[:8])}
    with announced_swarm(size=10, first_ip=60, announcements=plan) as swarm:
        # Separate runs: a visit waits ~2 s for its lookup, so with fewer torrents
        # than greenlets a torrent's revisit would overlap the others' first visits.
        s = settings_for(a.redis_url, ns(), tmp, ot, sink, db, dht=True,
                         dht_bootstrap=tuple(swarm.endpoints[:4]), dht_listen=(("127.0.0.245", 0),),
                         dht_timeout=8.0)
        r = run_worker(s, client, dht_hashes, a.concurrency)
        out["worker_trackers_and_dht_first_visits"] = r["phases"][0]
        r = run_worker(s, client, dht_hashes, a.concurrency, due_now=True)
        out["worker_trackers_and_dht_revisits"] = r["phases"][0]
        out["worker_trackers_and_dht_revisits"]["note"] = "a new worker process"

    # auto on a queue that cannot be drained: settles where the process is saturated
    s = settings_for(a.redis_url, ns(), tmp, ot, sink, db, revisit_seconds=0.2, concurrency_min=4,
                     concurrency_max=256)
    out["worker_auto_saturated"] = run_auto(s, client, hashes, auto_seconds, auto_interval)
    # auto on a paced queue: every torrent due again after `revisit`, about half the fixed pool's rate
    fixed = max(out["worker_trackers_revisits"]["visits_per_s"], 1.0)
    paced = hashes[: max(100, int(fixed * 5))]
    s = settings_for(a.redis_url, ns(), tmp, ot, sink, db, revisit_seconds=round(len(paced) / (fixed / 2), 2),
                     concurrency_min=4, concurrency_max=256)
    out["worker_auto_paced"] = run_auto(s, client, paced, auto_seconds, auto_interval)

    bns = ns()
    base_hashes = hashes[:n_base]
    out["baseline_btstat_first_visits"] = baseline(client, bns, ot, sink, db, base_hashes, a.concurrency)
    out["baseline_btstat_revisits"] = baseline(client, bns, ot, sink, db, base_hashes, a.concurrency)
    out["bare_announce_loop"] = bench_trackers.bench_bare(ot.port, hashes, 64, 3.0 if a.quick else 6.0)

    w1 = out["worker_trackers_first_visits"]["visits_per_s"]
    w2 = out["worker_trackers_revisits"]["visits_per_s"]
    b1 = out["baseline_btstat_first_visits"]["visits_per_s"]
    b2 = out["baseline_btstat_revisits"]["visits_per_s"]
    bare = out["bare_announce_loop"]["announces_per_s"]
    out["ratios"] = {
        "first_visits_vs_baseline_first_visits": ratio(w1, b1),
        "revisits_vs_baseline_revisits": ratio(w2, b2),
        "revisits_vs_baseline_first_visits": ratio(w2, b1),
        "first_visits_vs_bare_announces": ratio(w1, bare, 3),
        "revisits_vs_bare_announces": ratio(w2, bare, 3),
    }
    out["target_30x_met"] = all(x is not None and x >= 30 for x in (
        out["ratios"]["first_visits_vs_baseline_first_visits"], out["ratios"]["revisits_vs_baseline_revisits"]))
    out["targets_visits_in_batches"] = targets(out)


# Visits in batches, the target of four times the visits per worker process: (figure, its path in the output, bound, at most?).
TARGETS = [
    ("first visits / bare announces", ("ratios", "first_visits_vs_bare_announces"), 0.064, False),
    ("revisits / bare announces", ("ratios", "revisits_vs_bare_announces"), 0.144, False),
    ("Python CPU ms per first visit", ("worker_trackers_first_visits", "python_cpu_ms_per_visit"), 1.0, True),
    ("Python CPU ms per revisit", ("worker_trackers_revisits", "python_cpu_ms_per_visit"), 0.45, True),
    ("Redis CPU ms per first visit", ("worker_trackers_first_visits", "redis_cpu_ms_per_visit"), 0.5, True),
    ("Redis CPU ms per revisit", ("worker_trackers_revisits", "redis_cpu_ms_per_visit"), 0.2, True),
]


def targets(out: dict) -> dict:
    """Each target of ``TARGETS``: the figure measured, the bound, and whether it is met."""
    result = {}
    for name, (a, b), bound, at_most in TARGETS:
        value = out.get(a, {}).get(b)
        met = value is not None and (value <= bound if at_most else value >= bound)
        result[name] = {"value": value, "target": f"{'<=' if at_most else '>='} {bound}", "met": met}
    result["all_met"] = all(v["met"] for v in result.values())
    return result


def main() -> None:
    """Run the benchmark and print its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, ~2 minutes (full: ~4.5 minutes)")
    ap.add_argument("--redis-url", default=os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--overlap", type=int, default=4, help="swarms each peer address is in (default 4)")
    ap.add_argument("--only", choices=("first", "trackers"),
                    help="first: the trackers-only first visits; trackers: those and the revisits (for profiles)")
    a = ap.parse_args()
    logs.configure("warning", "json")
    _count_round_trips()
    n = 1000 if a.quick else 4000
    n_dht = 32 if a.quick else 96
    client = redis.Redis.from_url(a.redis_url)
    tmp = tempfile.mkdtemp(prefix="bench-worker-")
    db = write_city_db(Path(tmp) / "city.mmdb", PLACES)
    hashes = hashes_for("w", n)
    dht_hashes = hashes_for("d", n_dht)
    out: dict = {"mode": "quick" if a.quick else "full", "torrents": n, "peers_per_swarm": SWARM,
                 "concurrency": a.concurrency}
    namespaces = []

    def ns() -> str:
        namespaces.append("bench-worker-" + uuid.uuid4().hex[:8])
        return namespaces[-1]

    t_start = time.monotonic()
    ot = OpenTracker(Path(tmp) / "ot", hashes + dht_hashes).start()
    # The sink's listen backlog (256) takes the baseline's 64 concurrent posts.
    sink = StatHatSinkProcess()
    try:
        out["peer_addresses"] = populate(ot, hashes + dht_hashes, a.overlap)
        out["swarms_per_peer_address"] = a.overlap
        # First visits then revisits by the same process: revisit 1 ms, and the
        # revisits (score 0.8) are claimed only after every new torrent (1.0).
        s = settings_for(a.redis_url, ns(), tmp, ot, sink, db, revisit_seconds=0.001)
        if a.only == "first":
            r = run_worker(s, client, hashes, a.concurrency, until_idle=False, max_visits=n)
            out["worker_trackers_first_visits"] = r["phases"][0]
        else:
            r = run_worker(s, client, hashes, a.concurrency, split=n, until_idle=False, max_visits=2 * n)
            out["worker_trackers_first_visits"], out["worker_trackers_revisits"] = r["phases"]
            out["worker_trackers_start_and_stop_s"] = r["start_and_stop_s"]
        out["worker_trackers_peers_per_recording_batch"] = r["peers_per_recording_batch"]
        if a.only is None:
            rest(a, out, client, tmp, ot, sink, db, hashes, dht_hashes, ns)
    finally:
        sink.close()
        ot.stop()
        for x in namespaces:
            delete_namespace(client, x)
    out["bench_seconds"] = round(time.monotonic() - t_start, 1)
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
