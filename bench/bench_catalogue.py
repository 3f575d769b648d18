"""A catalogue like a real one, mostly dead: what each visit costs the trackers, scrape first or not.

Usage: python bench/bench_catalogue.py [--torrents 20000] [--empty 0.7] [--quick] [--runs 1]

One opentracker on loopback serves the catalogue over UDP and HTTP, and every
torrent names both. ``--empty`` of the torrents have no peer at all; the
rest have a long-tailed number of peers, from 1 to three times the tracker's
max (most small, a few above the max). For each mode (``scrape_off``: every
visit announces and withdraws at every tracker; ``scrape_on``: scrape first)
a fresh namespace gets the catalogue, one worker process visits every
torrent once (the first pass), then once more (a revisit pass), with the
DHT off (its budget is another bench's). Printed as JSON, per mode and
pass:

- tracker requests per visit, by kind (UDP connect, scrape, announce with
  its withdrawal; HTTP scrape, announce with its withdrawal), and for the
  empty swarms alone (a pass over ``--empty-sample`` of them by themselves);
- visits/s and Python CPU per visit of the worker process;
- counted (IP, torrent) pairs, and whether they equal the other mode's and
  the truth for every swarm at or below the tracker's max (a larger swarm is
  a sample of the max, different at each visit).

Each mode runs in the same process on the same tracker and Redis, one after
the other (``--runs`` times, alternating), so the two share the machine's
moments.
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from statistics import median  # noqa: E402

import redis  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_worker import PLACES, address, run_worker  # noqa: E402

from crawler import logs  # noqa: E402
from crawler.counters.rankings import top  # noqa: E402
from crawler.keys import Keys  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.source_settings import TrackerSpec  # noqa: E402
from tests.mmdb import write_city_db  # noqa: E402
from tests.namespaces import delete_namespace  # noqa: E402
from tests.opentracker import OpenTracker  # noqa: E402

MAX = 200  # the tracker's max (opentracker's numwant cap)


def catalogue(n: int, empty: float, rng: random.Random) -> dict[str, int]:
    """info-hash -> its swarm size: ``empty`` of them 0, the rest long-tailed from 1 to 3 * MAX."""
    sizes = {}
    for i in range(n):
        h = hashlib.sha1(f"catalogue-{i}".encode()).hexdigest()
        if rng.random() < empty:
            sizes[h] = 0
        else:
            sizes[h] = min(3 * MAX, max(1, int(rng.paretovariate(0.9))))
    return sizes


def populate(ot: OpenTracker, sizes: dict[str, int]) -> dict[str, set[str]]:
    """Announce each live swarm's peers (address k is in every swarm larger than k); the truth per torrent."""
    by_peer: dict[int, list[str]] = {}
    for h, size in sizes.items():
        for k in range(size):
            by_peer.setdefault(k, []).append(h)
    for k, torrents in by_peer.items():
        ot.announce_many(address(k), torrents, 40000 + k, left=0 if k % 3 == 0 else 1)
    return {h: {address(k) for k in range(size)} for h, size in sizes.items() if size}


def requests(p) -> dict:
    """The tracker requests a worker process sent, by kind."""
    t = p.trackers
    return {"udp_connect": t.udp.connects_sent, "udp_scrape": t.udp.scrapes_sent,
            "udp_announce_and_withdrawal": t.udp.announces_sent, "http_scrape": t.scrapes.http_requests,
            "http_announce_and_withdrawal": t.http_announces_sent}


def one_mode(client, redis_url, tmp, ot, db, sizes, scrape: bool, ns: str) -> dict:
    """A first pass and a revisit pass over ``sizes``'s torrents in namespace ``ns``, scrape first or not."""
    s = Settings(redis_url=redis_url, namespace=ns, data_dir=Path(tmp) / ns,
                 trackers=(TrackerSpec(ot.udp_url, MAX), TrackerSpec(ot.http_url, MAX)), dht=False,
                 allow_private=True, secret="bench-secret-0123456789", geoip_db=db, scrape_first=scrape,
                 evict_never_seen_seconds=86400.0, evict_lost_seconds=604800.0)
    hashes = list(sizes)
    out = {}
    try:
        for name, due_now in (("first_pass", False), ("revisit_pass", True)):
            r = run_worker(s, client, hashes, 128, due_now=due_now, until_idle=True)
            p = r.pop("_process")
            ph = r["phases"][0]
            sent = requests(p)
            visits = max(ph["visits"], 1)
            out[name] = {"visits": ph["visits"], "visits_per_s": ph["visits_per_s"],
                         "python_cpu_ms_per_visit": ph["python_cpu_ms_per_visit"],
                         "tracker_requests_per_visit": round(sum(sent.values()) / visits, 3),
                         "by_kind_per_visit": {k: round(v / visits, 3) for k, v in sent.items()}}
        counted = {m["metric"].split(".")[1]: m["count"]
                   for m in top(client, Keys(ns), "torrents", limit=len(sizes) + 10)}
        out["counted_pairs"] = sum(counted.values())
        out["_counted"] = counted
    finally:
        delete_namespace(client, ns)
    return out


def main() -> None:
    """Both modes, ``--runs`` times alternating; the JSON on stdout."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--torrents", type=int, default=20_000)
    ap.add_argument("--empty", type=float, default=0.7)
    ap.add_argument("--empty-sample", type=int, default=2_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="3,000 torrents, 300 empty alone")
    a = ap.parse_args()
    if a.quick:
        a.torrents, a.empty_sample = 3_000, 300
    logs.configure("warning", "json")
    rng = random.Random(7)
    sizes = catalogue(a.torrents, a.empty, rng)
    empties = {f"{i:040x}": 0 for i in range(1, a.empty_sample + 1)}
    client = redis.Redis.from_url(a.redis_url)
    with tempfile.TemporaryDirectory() as tmp:
        db = write_city_db(Path(tmp) / "city.mmdb", PLACES)
        ot = OpenTracker(Path(tmp) / "ot", list(sizes) + list(empties)).start()
        try:
            truth = populate(ot, sizes)
            runs: dict[str, list] = {"scrape_off": [], "scrape_on": []}
            empty_runs: dict[str, list] = {"scrape_off": [], "scrape_on": []}
            for r in range(a.runs):
                for mode in ("scrape_off", "scrape_on"):
                    ns = f"benchcat{r}{mode.replace('_', '')}"
                    runs[mode].append(one_mode(client, a.redis_url, tmp, ot, db, sizes, mode == "scrape_on", ns))
                    empty_runs[mode].append(one_mode(client, a.redis_url, tmp, ot, db, empties,
                                                     mode == "scrape_on", ns + "e"))
        finally:
            ot.stop()
    exact = {h: len(ips) for h, ips in truth.items() if len(ips) <= MAX}
    out = {"torrents": a.torrents, "empty_share": a.empty, "live": len(truth),
           "above_max": sum(len(ips) > MAX for ips in truth.values()), "tracker_max": MAX, "runs": a.runs}
    for mode in runs:
        counted = [r.pop("_counted") for r in runs[mode]][-1]
        for e in empty_runs[mode]:
            e.pop("_counted")
        out[mode] = {"catalogue": runs[mode], "empty_swarms_alone": empty_runs[mode],
                     "exact_at_or_below_max": all(counted.get(h) == n for h, n in exact.items())}
        out[mode]["_counted"] = counted
    off, on = out["scrape_off"].pop("_counted"), out["scrape_on"].pop("_counted")
    # swarms above the max are sampled (a different max peers each time): equal only at or below it
    out["counted_pairs_equal_at_or_below_max"] = all(off.get(h) == on.get(h) for h in exact)
    out["counted_pairs_at_or_below_max"] = {"scrape_off": sum(off.get(h, 0) for h in exact),
                                            "scrape_on": sum(on.get(h, 0) for h in exact),
                                            "truth": sum(exact.values())}

    def per_visit(mode, which, p):
        return median([r[p]["tracker_requests_per_visit"] for r in out[mode][which]])

    out["ratios"] = {
        "tracker_requests_per_visit_off_over_on_first_pass":
            round(per_visit("scrape_off", "catalogue", "first_pass") / per_visit("scrape_on", "catalogue", "first_pass"), 2),
        "tracker_requests_per_visit_off_over_on_revisit_pass":
            round(per_visit("scrape_off", "catalogue", "revisit_pass") / per_visit("scrape_on", "catalogue", "revisit_pass"), 2),
        "empty_swarm_requests_per_visit_on": per_visit("scrape_on", "empty_swarms_alone", "revisit_pass"),
        "visits_per_s_on_over_off_revisit_pass":
            round(median([r["revisit_pass"]["visits_per_s"] for r in out["scrape_on"]["catalogue"]])
                  / median([r["revisit_pass"]["visits_per_s"] for r in out["scrape_off"]["catalogue"]]), 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
