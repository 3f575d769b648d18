"""Visits per second of one worker process, against a btstat-like baseline, on loopback.

Usage: python bench/bench_worker.py [--quick] [--redis-url redis://127.0.0.1:6379/0]

Starts opentracker with N torrents whose swarms hold 50 peers (distinct
127.2.0.x addresses, placed in four countries by a small City database), a
local StatHat sink and, for the DHT run, a 10-node libtorrent swarm. Then, in
this one process (gevent patched first, as the worker command does):

- worker, trackers only: first visits (every peer new), then revisits;
- worker with the DHT as well (fewer torrents: a lookup waits for the
  traversal to settle);
- Redis round trips per visit (counted at redis-py's send_packed_command);
- ``--concurrency auto`` on a queue kept full: the pool sizes over time and
  whether the last ones are stable (within ±15 %);
- baseline: what btstat did per visit, with the same greenlet count: a UDP
  connect before every announce, one Redis command per round trip (claim,
  dedupe SET NX EX, two INCRs per new metric, score), one StatHat POST per
  increment to the local sink;
- bare: the sources issue's bare announce loop (bench_trackers.bench_bare),
  the ceiling for announces on this machine.

Prints JSON with each rate and the ratios worker/baseline (target >= 30) and
worker/bare.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import redis  # noqa: E402
from gevent.pool import Pool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_trackers  # noqa: E402
from crawler import logs  # noqa: E402
from crawler.counters.names import metrics_for, month_of  # noqa: E402
from crawler.keys import Keys  # noqa: E402
from crawler.lifecycle import NewItem, Queue  # noqa: E402
from crawler.settings import Settings, TrackerSpec  # noqa: E402
from crawler.sources import udp_codec as u  # noqa: E402
from geo import Locator  # noqa: E402
from tests.mmdb import write_city_db  # noqa: E402
from tests.opentracker import OpenTracker  # noqa: E402
from tests.stathat_sink import StatHatSink  # noqa: E402

PLACES = {
    "127.2.0.0/26": ("Germany", "Berlin", "10115"),
    "127.2.0.64/26": ("Japan", "東京", "100-0001"),
    "127.2.0.128/26": ("Brasil", "São Paulo", "01000-000"),
    "127.2.0.192/26": ("Iceland", None, None),
    "127.0.0.0/24": ("Iceland", None, None),
}

ROUND_TRIPS = [0]


def _count_round_trips() -> None:
    orig = redis.connection.AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        ROUND_TRIPS[0] += 1
        return orig(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counted


def hashes_for(tag: str, n: int) -> list[str]:
    import hashlib

    return [hashlib.sha1(f"{tag}-{i}".encode()).hexdigest() for i in range(n)]


def delete_ns(client, ns: str) -> None:
    for k in client.scan_iter(match="{" + ns + "}*", count=1000):
        client.delete(k)


def settings_for(redis_url, ns, tmp, ot, sink, db, **kw) -> Settings:
    base = dict(redis_url=redis_url, namespace=ns, data_dir=Path(tmp) / "d",
                trackers=(TrackerSpec(ot.udp_url, 200),), dht=False, allow_private=True,
                secret="bench-secret-0123456789", geoip_db=db, stathat_ezkey="bench", stathat_url=sink.url,
                flush_seconds=1.0)
    base.update(kw)
    return Settings(**base)


def run_worker(s: Settings, client, hashes: list[str], concurrency, readd=True, **kw) -> dict:
    from workers.process import Process

    keys = Keys(s.namespace)
    if readd:
        Queue(client, keys, s).add([NewItem(h) for h in hashes])
    p = Process(s, client, keys, concurrency=concurrency, until_idle=kw.pop("until_idle", True), **kw)
    rt0, t0 = ROUND_TRIPS[0], time.monotonic()
    p.run(signals=False)
    elapsed = time.monotonic() - t0
    visits = p.worker.health.visits
    return {"visits": visits, "failed": p.worker.health.failed, "seconds": round(elapsed, 2),
            "visits_per_s": round(visits / elapsed, 1),
            "round_trips_per_visit": round((ROUND_TRIPS[0] - rt0) / max(visits, 1), 2),
            "peers_per_visit": round(p.worker.health.peers / max(visits, 1), 1), "_process": p}


def make_due(client, keys: Keys) -> None:
    """Every cooling torrent due now: the next run revisits them."""
    members = client.zrange(keys.cooling, 0, -1)
    if members:
        client.zadd(keys.cooling, {m: time.time() - 1 for m in members})


def baseline(client, ns: str, ot: OpenTracker, sink: StatHatSink, db, hashes: list[str], concurrency: int,
             seconds: float) -> dict:
    """btstat per visit: connect+announce, one command per round trip, one POST per increment."""
    k = Keys(ns)
    client.zadd(k.sub("bq"), {h: 1.0 for h in hashes})
    loc = Locator.open(db)
    month = month_of(time.time())
    done = [0]
    t0 = time.monotonic()

    def post(stat: str) -> None:
        body = json.dumps({"ezkey": "bench", "data": [{"stat": stat, "count": 1}]}).encode()
        req = urllib.request.Request(sink.url, body, {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()

    def visit() -> None:
        while time.monotonic() - t0 < seconds:
            popped = client.zpopmax(k.sub("bq"))
            if not popped:
                return
            h, score = popped[0][0].decode(), popped[0][1]
            import socket

            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.settimeout(2)
                dest = ("127.0.0.1", ot.port)
                s.sendto(u.connect_request(7), dest)  # a connect before every announce
                cid = u.parse_reply(s.recv(64)).connection_id
                s.sendto(u.AnnounceRequest(cid, 8, bytes.fromhex(h), os.urandom(20), 55556, 200,
                                           u.EVENT_STARTED, left=1).encode(), dest)
                reply = u.parse_reply(s.recv(65536))
            new = 0
            for ip, _ in reply.peers:
                p = loc.locate(ip)
                for m in metrics_for(h, p.country, p.city, p.postcode):
                    if client.set(k.sub("bm", m.name, ip), 1, nx=True, ex=30 * 86400):
                        client.incr(k.sub("bc", m.name))
                        client.incr(k.sub("bc", m.name, month))
                        if m.family == "countries":
                            post(m.name)
                        new += 1
            client.zadd(k.sub("bs"), {h: score * (0.8 if reply.peers else 0.5)})
            done[0] += 1

    pool = Pool(concurrency)
    for _ in range(concurrency):
        pool.spawn(visit)
    pool.join()
    elapsed = time.monotonic() - t0
    return {"visits": done[0], "seconds": round(elapsed, 2), "visits_per_s": round(done[0] / elapsed, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, ~1 minute")
    ap.add_argument("--redis-url", default=os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--concurrency", type=int, default=64)
    a = ap.parse_args()
    logs.configure("warning", "json")
    _count_round_trips()
    n = 400 if a.quick else 2000
    n_dht = 16 if a.quick else 64
    auto_seconds = 20 if a.quick else 60
    base_seconds = 8 if a.quick else 20
    client = redis.Redis.from_url(a.redis_url)
    tmp = tempfile.mkdtemp(prefix="bench-worker-")
    db = write_city_db(Path(tmp) / "city.mmdb", PLACES)
    hashes = hashes_for("w", n)
    dht_hashes = hashes_for("d", n_dht)
    out: dict = {"torrents": n, "peers_per_swarm": bench_trackers.SWARM, "concurrency": a.concurrency}
    namespaces = []

    def ns() -> str:
        namespaces.append("bench-worker-" + uuid.uuid4().hex[:8])
        return namespaces[-1]

    ot = OpenTracker(Path(tmp) / "ot", hashes + dht_hashes).start()
    sink = StatHatSink()
    try:
        bench_trackers.populate(ot, hashes + dht_hashes)
        s = settings_for(a.redis_url, ns(), tmp, ot, sink, db)
        first = run_worker(s, client, hashes, a.concurrency)
        make_due(client, Keys(s.namespace))
        again = run_worker(s, client, hashes, a.concurrency, readd=False)
        out["worker_trackers_first_visits"] = {k: v for k, v in first.items() if k != "_process"}
        out["worker_trackers_revisits"] = {k: v for k, v in again.items() if k != "_process"}

        from tests.dht_swarm import announced_swarm

        plan = {h: ([i % 10, (i + 3) % 10, (i + 6) % 10], 9000 + 10 * i) for i, h in enumerate(dht_hashes[:8])}
        with announced_swarm(size=10, first_ip=60, announcements=plan) as swarm:
            s = settings_for(a.redis_url, ns(), tmp, ot, sink, db, dht=True,
                             dht_bootstrap=tuple(swarm.endpoints[:4]), dht_listen=("127.0.0.245", 0),
                             dht_timeout=8.0)
            r = run_worker(s, client, dht_hashes, a.concurrency)
            out["worker_trackers_and_dht_first_visits"] = {k: v for k, v in r.items() if k != "_process"}

        s = settings_for(a.redis_url, ns(), tmp, ot, sink, db, revisit_seconds=0.2, concurrency_min=4,
                         concurrency_max=256)
        r = run_worker(s, client, hashes, None, until_idle=False, duration=auto_seconds, autoscale_interval=1.0,
                       autoscale_options={"latency_target": 0.5})
        hist = r["_process"].worker.autoscaler.history
        sizes = [x["size"] for x in hist]
        tail = sizes[-5:]
        out["worker_auto"] = {
            "visits_per_s": r["visits_per_s"], "sizes": sizes, "last_sample": hist[-1] if hist else None,
            "final_size": sizes[-1] if sizes else None,
            "stable": bool(tail) and max(tail) <= 1.15 * min(tail),
        }

        bns = ns()
        out["baseline_btstat"] = baseline(client, bns, ot, sink, db, hashes, a.concurrency, base_seconds)
        out["bare_announce_loop"] = bench_trackers.bench_bare(ot.port, hashes, 64, 3.0 if a.quick else 8.0)

        w = out["worker_trackers_first_visits"]["visits_per_s"]
        w2 = out["worker_trackers_revisits"]["visits_per_s"]
        b = out["baseline_btstat"]["visits_per_s"]
        bare = out["bare_announce_loop"]["announces_per_s"]
        out["ratios"] = {
            "first_visits_vs_baseline": round(w / b, 1) if b else None,
            "revisits_vs_baseline": round(w2 / b, 1) if b else None,
            "first_visits_vs_bare_announces": round(w / bare, 3) if bare else None,
            "revisits_vs_bare_announces": round(w2 / bare, 3) if bare else None,
        }
    finally:
        sink.close()
        ot.stop()
        for x in namespaces:
            delete_ns(client, x)
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
