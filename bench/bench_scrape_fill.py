"""How full scrape packets are, and what a visit costs the trackers, behind two trackers with no rate.

Usage: python bench/bench_scrape_fill.py [--torrents 3000] [--empty 0.7] [--concurrency 64]
                                          [--steady-torrents 180] [--revisit 60] [--steady-seconds 900]
                                          [--quick] [--skip-steady]

The world: two opentrackers on loopback, one asked over UDP and one over
HTTP (different ports, so two distinct trackers), neither with a ``RATE`` and
no namespace cap. Every torrent names both in its own tracker list (as a
magnet's ``tr=`` do; no default trackers). ``--empty`` of the swarms have
nobody; each other has 1 to 8 peers, the same ones on both trackers. The
HTTP tracker sits behind ``http_tap.py``, which counts what it receives
(requests and the info-hashes of its scrapes) and makes its replies state
``--revisit`` seconds as their interval and min interval.

Two parts, each on a fresh namespace, one worker process (this one) at
``--concurrency``:

- ``first_pass``: ``--torrents`` torrents, all due at once, visited once
  (``--until-idle``);
- ``steady``: ``--steady-torrents`` torrents revisited every ``--revisit``
  seconds, their due times spread evenly over one revisit interval (as a
  catalogue's are once visits of different lengths have spread them),
  crawled for ``--steady-seconds`` and measured over the second half.

Counted: UDP scrape packets and the info-hashes they carried (at the
crawler's UDP client, every packet sent; the tracker's own count of scrape
packets beside it, from its statistics page), UDP connects and announces
(withdrawals included) as the tracker counted them, and the HTTP tracker's
requests by kind. Printed as JSON per part: hashes per UDP scrape packet and
per HTTP scrape, tracker requests per visit, scrape requests (and UDP
connects) per visit and tracker (what an empty swarm's visit costs each
tracker it names: it only scrapes), visits/s, and whether the counted (IP,
torrent) pairs equal the truth.
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_worker import PLACES, address  # noqa: E402

from crawler import logs  # noqa: E402
from crawler.counters.rankings import top  # noqa: E402
from crawler.keys import Keys  # noqa: E402
from crawler.queue.queue import Queue  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.sources.trackers.udp_client import UdpTrackerClient  # noqa: E402
from crawler.torrents.items import NewItem  # noqa: E402
from tests.mmdb import write_city_db  # noqa: E402
from tests.namespaces import delete_namespace  # noqa: E402
from tests.opentracker import OpenTracker  # noqa: E402
from workers.connections import worker_client  # noqa: E402
from workers.process import Process, tune_gc  # noqa: E402

# UDP scrape packets the crawler sent and the info-hashes in them (every version of the
# crawler sends its UDP scrapes through UdpTrackerClient.scrape).
UDP = {"packets": 0, "hashes": 0}
_scrape = UdpTrackerClient.scrape


def _counted_scrape(self, addr, family, info_hashes, deadline):
    UDP["packets"] += 1
    UDP["hashes"] += len(info_hashes)
    return _scrape(self, addr, family, info_hashes, deadline)


UdpTrackerClient.scrape = _counted_scrape


def world(n: int, empty: float, tag: str, rng: random.Random) -> dict[str, int]:
    """info-hash -> its swarm size: ``empty`` of them 0, the others 1 to 8."""
    return {hashlib.sha1(f"{tag}-{i}".encode()).hexdigest(): 0 if rng.random() < empty else rng.randint(1, 8)
            for i in range(n)}


def populate(trackers: list[OpenTracker], sizes: dict[str, int], first: int) -> dict[str, int]:
    """Announce each live swarm's peers to every tracker (peer k of a swarm is address first + k)."""
    by_peer: dict[int, list[str]] = {}
    for h, size in sizes.items():
        for k in range(size):
            by_peer.setdefault(first + k, []).append(h)
    for ot in trackers:
        for k, torrents in by_peer.items():
            ot.announce_many(address(k), torrents, 40000 + k, left=k % 2)
    return {h: size for h, size in sizes.items() if size}


def ot_udp(ot: OpenTracker) -> dict[str, int]:
    """The UDP requests ``ot`` received, by kind, from its statistics page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ot.port}/stats?mode=everything", timeout=5) as r:
        page = r.read().decode()
    udp = re.search(r"<udp>(.*?)</udp>", page, re.S).group(1)
    return {k: int(re.search(rf"<{k}>(\d+)</{k}>", udp).group(1)) for k in ("connect", "announce", "scrape")}


def tap_counts(port: int) -> dict[str, int]:
    """What the HTTP tracker behind the tap on ``port`` received, by kind."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/tap-stats", timeout=5) as r:
        return json.loads(r.read())


class Marks:
    """Every count at one instant."""

    def __init__(self, ot_u: OpenTracker, tap_port: int, visits: int):
        self.t, self.visits = time.monotonic(), visits
        self.udp, self.sent = ot_udp(ot_u), dict(UDP)
        self.http = tap_counts(tap_port)


def figures(a: Marks, b: Marks) -> dict:
    """What happened between ``a`` and ``b``."""
    visits = max(b.visits - a.visits, 1)
    udp = {k: b.udp[k] - a.udp[k] for k in b.udp}
    http = {k: b.http[k] - a.http[k] for k in b.http}
    packets, hashes = b.sent["packets"] - a.sent["packets"], b.sent["hashes"] - a.sent["hashes"]
    requests = sum(udp.values()) + http["announce"] + http["withdrawal"] + http["scrape"]
    scrape_share = udp["scrape"] + udp["connect"] + http["scrape"]
    return {
        "visits": b.visits - a.visits, "seconds": round(b.t - a.t, 1),
        "visits_per_s": round((b.visits - a.visits) / max(b.t - a.t, 1e-6), 1),
        "udp_hashes_per_scrape_packet": round(hashes / packets, 1) if packets else None,
        "udp_scrape_packets": packets, "udp_scrape_packets_tracker_counted": udp["scrape"],
        "http_hashes_per_scrape": round(http["scrape_hashes"] / http["scrape"], 1) if http["scrape"] else None,
        "http_scrapes": http["scrape"],
        "tracker_requests_per_visit": round(requests / visits, 3),
        "scrape_requests_per_visit_per_tracker": round(scrape_share / visits / 2, 4),
        "requests": {"udp_connect": udp["connect"], "udp_announce_and_withdrawal": udp["announce"],
                     "udp_scrape": udp["scrape"], "http_announce": http["announce"],
                     "http_withdrawal": http["withdrawal"], "http_scrape": http["scrape"]},
    }


def counted_exactly(client, ns: str, truth: dict[str, int]) -> bool:
    """Whether the (IP, torrent) pairs counted in ``ns`` are the truth's, torrent by torrent."""
    counted = {m["metric"].split(".")[1]: m["count"] for m in top(client, Keys(ns), "torrents", limit=len(truth) + 10)}
    return all(counted.get(h) == n for h, n in truth.items()) and set(counted) <= set(truth)


def crawl(s: Settings, wc, client, ot_u, tap_port: int, sizes: dict[str, int], urls: tuple[str, str],
          concurrency: int, spread: float | None, seconds: float | None) -> dict:
    """Add ``sizes``'s torrents and run one worker: until idle (``seconds`` None) or for ``seconds``,
    measured over the second half. ``spread``: due times spread evenly over that many seconds."""
    keys = Keys(s.namespace)
    Queue(client, keys, s).add([NewItem(h, urls) for h in sizes])
    if spread:
        hashes = list(sizes)
        random.Random(3).shuffle(hashes)
        now = time.time()
        client.zadd(keys.cooling, {h: now + spread * i / len(hashes) for i, h in enumerate(hashes)})
    box: list = [None]
    p = Process(s, wc, keys, concurrency=concurrency, until_idle=seconds is None, duration=seconds,
                on_visit=lambda v: None)
    tune_gc()  # as the worker command does
    marks: list[Marks] = []

    def half() -> None:
        gevent.sleep(seconds / 2)
        marks.append(Marks(ot_u, tap_port, p.worker.health.visits))

    start = Marks(ot_u, tap_port, 0)
    if seconds:
        box[0] = gevent.spawn(half)
    p.run(signals=False)
    end = Marks(ot_u, tap_port, p.worker.health.visits)
    out = figures(marks[0] if marks else start, end)
    out["failed_visits"] = p.worker.health.failed
    ahead = getattr(p.visitor, "ahead", None)  # scrapes asked ahead of the visits, where the crawler has them
    if ahead is not None:
        out["scrape_ahead"] = {"peeks": ahead.peeks, "seats_ahead": ahead.ahead, "seats_used": ahead.used}
    return out


def main() -> None:
    """Both parts; the JSON on stdout."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--torrents", type=int, default=3000)
    ap.add_argument("--empty", type=float, default=0.7)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--steady-torrents", type=int, default=180)
    ap.add_argument("--revisit", type=float, default=60.0)
    ap.add_argument("--steady-seconds", type=float, default=900.0)
    ap.add_argument("--skip-steady", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a steady crawl of 300 s instead of 900")
    a = ap.parse_args()
    if a.quick:
        a.steady_seconds = 300.0
    logs.configure("warning", "json")
    rng = random.Random(11)
    first = world(a.torrents, a.empty, "fill", rng)
    steady = world(a.steady_torrents, a.empty, "steady", rng)
    client = redis.Redis.from_url(a.redis_url)
    wc = worker_client(client, a.concurrency + 64)
    run = f"{time.time_ns() % 10**9:09d}"
    out: dict = {"torrents": a.torrents, "empty_share": a.empty, "concurrency": a.concurrency,
                 "live": sum(1 for n in first.values() if n)}
    with tempfile.TemporaryDirectory() as tmp:
        db = write_city_db(Path(tmp) / "city.mmdb", PLACES)
        hashes = list(first) + list(steady)
        ot_u = OpenTracker(Path(tmp) / "otu", hashes).start()
        ot_h = OpenTracker(Path(tmp) / "oth", hashes).start()
        tap = subprocess.Popen([sys.executable, str(ROOT / "bench" / "http_tap.py"), str(ot_h.port),
                                "--interval", str(int(a.revisit))], stdout=subprocess.PIPE, text=True)
        try:
            tap_port = int(tap.stdout.readline())
            urls = (ot_u.udp_url, f"http://127.0.0.1:{tap_port}/announce")
            truth = populate([ot_u, ot_h], first, 0)
            truth_steady = populate([ot_u, ot_h], steady, 100)

            def settings(ns: str) -> Settings:
                return Settings(redis_url=a.redis_url, namespace=ns, data_dir=Path(tmp) / ns, trackers=(),
                                dht=False, allow_private=True, secret="bench-secret-0123456789", geoip_db=db,
                                revisit_seconds=a.revisit, evict_never_seen_seconds=86400.0,
                                evict_lost_seconds=604800.0)

            ns = f"benchfill{run}a"
            try:
                out["first_pass"] = crawl(settings(ns), wc, client, ot_u, tap_port, first, urls, a.concurrency,
                                          None, None)
                out["first_pass"]["counted_exactly"] = counted_exactly(client, ns, truth)
            finally:
                delete_namespace(client, ns)
            if not a.skip_steady:
                ns = f"benchfill{run}b"
                try:
                    out["steady"] = crawl(settings(ns), wc, client, ot_u, tap_port, steady, urls, a.concurrency,
                                          a.revisit, a.steady_seconds)
                    out["steady"].update(torrents=a.steady_torrents, revisit_s=a.revisit,
                                         crawled_s=a.steady_seconds, measured="second half",
                                         counted_exactly=counted_exactly(client, ns, truth_steady))
                finally:
                    delete_namespace(client, ns)
        finally:
            tap.terminate()
            tap.wait(5)
            ot_u.stop()
            ot_h.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
