"""A catalogue like a real one, mostly dead: what each visit costs the trackers and the DHT, before and after.

Usage: python bench/bench_catalogue.py [--torrents 20000] [--empty 0.7] [--quick] [--runs 1]

One opentracker on loopback serves the catalogue over UDP and HTTP, and every
torrent names both URLs. ``--empty`` of the torrents have no peer at all; the
rest have a long-tailed number of peers, from 1 to three times the tracker's
max (most small, a few above the max). For each mode (``before``: every
visit announces and withdraws at every URL, as the crawler did before scrape
first and one ask per tracker, ``PEERCRAWL_SCRAPE=off`` and
``PEERCRAWL_ONE_ASK_PER_TRACKER=off``; ``after``: the defaults, which ask
the tracker behind both URLs once and scrape it first) a fresh namespace
gets the catalogue, one worker process visits every
torrent once (the first pass), then once more (a revisit pass, as a
revisit interval later: every tracker's min interval has passed), with the
DHT off (the DHT part below measures it). Printed as JSON, per mode and
pass:

- tracker requests per visit, by kind (UDP connect, scrape, announce with
  its withdrawal; HTTP scrape, announce with its withdrawal), and for the
  empty swarms alone (a pass over ``--empty-sample`` of them by themselves);
- visits/s and Python CPU per visit of the worker process;
- counted (IP, torrent) pairs, and whether they equal the other mode's and
  the truth for every swarm at or below the tracker's max (a larger swarm is
  a sample of the max, different at each visit).

The DHT part (``--dht-torrents``, 0 to leave it out): a 10-node libtorrent
swarm on loopback where ``--dht-live`` of the torrents have peers (on the DHT
only: the tracker knows none of them) and the rest have nobody anywhere.
One worker visits them for ``--dht-passes`` passes, each torrent due at once
for the next, with a DHT lookup on every visit (``dht_every_visit``,
``PEERCRAWL_DHT_EMPTY_VISITS=0``: the crawler before the widening schedule)
or on the schedule (``dht_schedule``, the default 3), the rest as ``after``. Printed per pass: DHT
lookups per visit, ``get_peers`` queries the swarm's nodes received per
visit, and whether every swarm with peers was looked up and counted.

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


def one_mode(client, redis_url, tmp, ot, db, sizes, after: bool, ns: str) -> dict:
    """A first pass and a revisit pass over ``sizes``'s torrents in namespace ``ns``, as before or after."""
    s = Settings(redis_url=redis_url, namespace=ns, data_dir=Path(tmp) / ns,
                 trackers=(TrackerSpec(ot.udp_url, MAX), TrackerSpec(ot.http_url, MAX)), dht=False,
                 allow_private=True, secret="bench-secret-0123456789", geoip_db=db, scrape_first=after,
                 one_ask_per_tracker=after,
                 evict_never_seen_seconds=86400.0, evict_lost_seconds=604800.0)
    hashes = list(sizes)
    out = {}
    try:
        for name, due_now in (("first_pass", False), ("revisit_pass", True)):
            if due_now:
                # A revisit comes a revisit interval (30 min) later, when every tracker's min interval
                # (opentracker's: about 15 min) has passed: nothing is held back from it.
                for h in hashes:
                    client.delete(Keys(ns).tracker_min_interval(h))
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


def dht_mode(client, redis_url, tmp, ot, db, swarm, hashes: list[str], truth: dict, empty_visits: int, passes: int,
             ns: str) -> dict:
    """``passes`` passes over the DHT world, looking up on every visit or on the schedule."""
    from bench_dht import _counters

    from crawler.queue.view import QueueView

    s = Settings(redis_url=redis_url, namespace=ns, data_dir=Path(tmp) / ns, trackers=(TrackerSpec(ot.udp_url, MAX),),
                 dht=True, dht_bootstrap=tuple(swarm.endpoints[:4]), dht_listen=(("127.0.0.245", 0),), dht_timeout=8.0,
                 dht_settle=0.5,
                 dht_empty_visits=empty_visits, allow_private=True, secret="bench-secret-0123456789", geoip_db=db,
                 evict_never_seen_seconds=86400.0, evict_lost_seconds=604800.0)
    view = QueueView(client, Keys(ns))

    def get_peers_in() -> int:
        return sum(_counters(n).get("dht.dht_get_peers_in", 0) for n in swarm.nodes)

    out = []
    try:
        for i in range(passes):
            before = get_peers_in()
            # as many visits at a time as lookups in flight: a visit queued longer for a lookup slot than
            # the lookup's deadline would fail it, and a failed lookup says nothing of the swarm
            r = run_worker(s, client, hashes, s.dht_lookups_in_flight, due_now=i > 0, until_idle=True)
            r.pop("_process")
            ph = r["phases"][0]
            visits = max(ph["visits"], 1)
            codes = {h: ((view.torrent(h) or {}).get("last_visit_sources") or {}).get("dht") for h in hashes}
            looked = sum(c == "looked up" for c in codes.values())
            out.append({"pass": i + 1, "visits": ph["visits"], "dht_lookups_per_visit": round(looked / visits, 3),
                        "get_peers_received_per_visit": round((get_peers_in() - before) / visits, 2),
                        "every_live_swarm_looked_up": all(codes[h] == "looked up" for h in truth)})
        counted = {m["metric"].split(".")[1]: m["count"] for m in top(client, Keys(ns), "torrents", limit=len(hashes) + 10)}
        return {"passes": out, "live_swarms_counted_exactly": all(counted.get(h) == len(ips) for h, ips in truth.items())}
    finally:
        delete_namespace(client, ns)


def dht_part(a, client, tmp, ot, db, hashes: list[str]) -> dict:
    """Both DHT modes over one swarm (``--runs`` times, alternating)."""
    from tests.dht_swarm import announced_swarm

    live = hashes[:a.dht_live]
    plan = {h: ([i % 10, (i + 3) % 10, (i + 6) % 10], 9000 + 10 * i) for i, h in enumerate(live)}
    runs: dict[str, list] = {"dht_every_visit": [], "dht_schedule": []}
    with announced_swarm(size=10, first_ip=60, announcements=plan) as swarm:
        truth = {h: {ip for ip, _ in peers} for h, peers in swarm.expected.items()}
        for r in range(a.runs):
            for mode, k in (("dht_every_visit", 0), ("dht_schedule", 3)):
                runs[mode].append(dht_mode(client, a.redis_url, tmp, ot, db, swarm, hashes, truth, k, a.dht_passes,
                                           f"benchcatdht{r}{k}"))
    out: dict = {"torrents": len(hashes), "live_on_the_dht_only": len(live), "passes": a.dht_passes, **runs}

    def per_visit(mode: str, field: str, first: int) -> float:
        """The median over runs of ``field`` per visit over the passes from ``first`` (1-based) on."""
        return median([sum(p[field] * p["visits"] for p in r["passes"][first - 1:])
                       / max(sum(p["visits"] for p in r["passes"][first - 1:]), 1) for r in runs[mode]])

    for name, first in (("all_passes", 1), ("from_pass_4", 4)):
        every, sched = per_visit("dht_every_visit", "dht_lookups_per_visit", first), \
            per_visit("dht_schedule", "dht_lookups_per_visit", first)
        out[f"lookups_per_visit_every_over_schedule_{name}"] = round(every / sched, 2) if sched else None
    return out


def main() -> None:
    """Both modes, ``--runs`` times alternating; the JSON on stdout."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--torrents", type=int, default=20_000)
    ap.add_argument("--empty", type=float, default=0.7)
    ap.add_argument("--empty-sample", type=int, default=2_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--dht-torrents", type=int, default=200)
    ap.add_argument("--dht-live", type=int, default=20)
    ap.add_argument("--dht-passes", type=int, default=6)
    ap.add_argument("--dht-only", action="store_true", help="the DHT part alone")
    ap.add_argument("--quick", action="store_true", help="3,000 torrents, 300 empty alone, 80 on the DHT")
    a = ap.parse_args()
    if a.quick:
        a.torrents, a.empty_sample, a.dht_torrents, a.dht_live = 3_000, 300, 80, 10
    logs.configure("warning", "json")
    rng = random.Random(7)
    sizes = catalogue(a.torrents, a.empty, rng)
    empties = {f"{i:040x}": 0 for i in range(1, a.empty_sample + 1)}
    dht_hashes = [hashlib.sha1(f"catalogue-dht-{i}".encode()).hexdigest() for i in range(a.dht_torrents)]
    client = redis.Redis.from_url(a.redis_url)
    with tempfile.TemporaryDirectory() as tmp:
        db = write_city_db(Path(tmp) / "city.mmdb", PLACES)
        if a.dht_only:
            sizes, empties = {}, {}
        ot = OpenTracker(Path(tmp) / "ot", list(sizes) + list(empties) + dht_hashes).start()
        try:
            truth = populate(ot, sizes)
            runs: dict[str, list] = {"before": [], "after": []}
            empty_runs: dict[str, list] = {"before": [], "after": []}
            for r in range(0 if a.dht_only else a.runs):
                for mode in ("before", "after"):
                    ns = f"benchcat{r}{mode}"
                    runs[mode].append(one_mode(client, a.redis_url, tmp, ot, db, sizes, mode == "after", ns))
                    empty_runs[mode].append(one_mode(client, a.redis_url, tmp, ot, db, empties,
                                                     mode == "after", ns + "e"))
            dht = dht_part(a, client, tmp, ot, db, dht_hashes) if dht_hashes else None
        finally:
            ot.stop()
    if a.dht_only:
        print(json.dumps({"dht": dht}, indent=2))
        return
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
    off, on = out["before"].pop("_counted"), out["after"].pop("_counted")
    # swarms above the max are sampled (a different max peers each time): equal only at or below it
    out["counted_pairs_equal_at_or_below_max"] = all(off.get(h) == on.get(h) for h in exact)
    out["counted_pairs_at_or_below_max"] = {"before": sum(off.get(h, 0) for h in exact),
                                            "after": sum(on.get(h, 0) for h in exact),
                                            "truth": sum(exact.values())}

    def per_visit(mode, which, p):
        return median([r[p]["tracker_requests_per_visit"] for r in out[mode][which]])

    def speed(mode, p):
        return median([r[p]["visits_per_s"] for r in out[mode]["catalogue"]])

    out["ratios"] = {
        "tracker_requests_per_visit_before_over_after_first_pass":
            round(per_visit("before", "catalogue", "first_pass") / per_visit("after", "catalogue", "first_pass"), 2),
        "tracker_requests_per_visit_before_over_after_revisit_pass":
            round(per_visit("before", "catalogue", "revisit_pass") / per_visit("after", "catalogue", "revisit_pass"), 2),
        "empty_swarm_requests_per_visit_after": per_visit("after", "empty_swarms_alone", "revisit_pass"),
        "visits_per_s_after_over_before_first_pass": round(speed("after", "first_pass") / speed("before", "first_pass"), 2),
        "visits_per_s_after_over_before_revisit_pass":
            round(speed("after", "revisit_pass") / speed("before", "revisit_pass"), 2),
    }
    out["dht"] = dht
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
