"""What WAIT costs a recording (PEERCRAWL_WAIT_REPLICAS), printing JSON.

On a loopback Redis Cluster of three masters and three replicas
(``tests.redis_cluster``, started for the run), the recorder records first
visits of 50 fresh peers each, as a worker does (``Recorder.record_visit``:
record.lua calls, pipelined), with WAIT off (the baseline) and with WAIT 1,
in alternating rounds of the same run:

- latency: one greenlet, one visit after the other (p50, p99 per visit);
- throughput: 32 greenlets at once (visits/s and script calls/s).

The recorder does not pass a ``Wait`` yet; the benchmark makes it send its
record.lua calls through ``run_pipelined(..., wait=)`` as it will (a lone
call too, which it sends as a plain EVALSHA today), in both modes alike.
The peers are located before the clock starts (``record_places_many``), so the
figures are the recording's round trips, not GeoIP lookups.

    python bench/bench_wait.py            # 2,000 visits per round
    python bench/bench_wait.py --quick    # 300
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()  # before anything imports ssl or socket

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import gevent.pool  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from crawler import logs
from crawler.counters import Recorder  # noqa: E402
from crawler.keys import Keys  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.store import connect as store  # noqa: E402
from crawler.store.replica_wait import Wait  # noqa: E402
from crawler.store.store import Store  # noqa: E402
from tests.redis_cluster import RedisCluster  # noqa: E402

PEERS = 50
CONCURRENCY = 32
ROUNDS = 2


class Counted(Store):
    """The recorder's store, every batch sent with this mode's ``wait``, counting the record.lua calls sent."""

    def __init__(self, client, wait):
        super().__init__(client)
        self.wait, self.calls = wait, 0

    def run(self, calls, wait=None, *, own=False):
        """The recorder's ``Store.run(calls)``."""
        self.calls += len(calls)
        return super().run(calls, wait=self.wait, own=own)


class Pipelined:
    """The recorder's record.lua Script, a lone call sent through ``Counted`` too."""

    def __init__(self, script, client, counted: Counted):
        self.script, self.sha, self._script = script.script, script.sha, script
        self._client, self._counted = client, counted

    def __call__(self, keys, args):
        """One call, as ``Script.__call__``."""
        return self._counted.run([(self._script, keys, args)])[0]


def located_visits(rec: Recorder, n: int, rng: random.Random) -> list[list]:
    """``n`` visits of ``PEERS`` fresh public IPs each, packed and located."""
    from crawler.counters.recorder import normalize_ip

    out = []
    for _ in range(n):
        ips = (f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
               for _ in range(PEERS))
        out.append([(p, rec.locator.locate(ip)) for ip in ips if (p := normalize_ip(ip)) is not None])
    return out


def latency(rec: Recorder, visits: list[list]) -> dict:
    """One visit after the other: p50 and p99 of a recording."""
    took = []
    for i, located in enumerate(visits):
        start = time.perf_counter()
        rec.record_places_many([(f"{i:040x}", located)], time.time())
        took.append(time.perf_counter() - start)
    took.sort()
    return {"p50_ms": round(1000 * took[len(took) // 2], 3), "p99_ms": round(1000 * took[int(len(took) * 0.99)], 3)}


def throughput(rec: Recorder, visits: list[list], counted: Counted) -> dict:
    """``CONCURRENCY`` greenlets recording at once: visits/s and record.lua calls/s."""
    pool = gevent.pool.Pool(CONCURRENCY)
    before = counted.calls
    start = time.perf_counter()
    for i, located in enumerate(visits):
        pool.spawn(rec.record_places_many, [(f"{i + 10**6:040x}", located)], time.time())
    pool.join()
    took = time.perf_counter() - start
    return {"visits_per_s": round(len(visits) / took, 1),
            "script_calls_per_s": round((counted.calls - before) / took, 1)}


def measure(client, keys, settings, wait, visits: int, seed: int) -> dict:
    """One round of one mode in its own namespace (fresh marks: every peer is new)."""
    counted = Counted(client, wait)
    rec = Recorder(counted, keys, settings)
    rec._record = Pipelined(rec._record, client, counted)
    rng = random.Random(seed)
    one, many = located_visits(rec, visits, rng), located_visits(rec, visits, rng)
    out = {**latency(rec, one), **throughput(rec, many, counted)}
    if wait is not None:
        out["short"] = wait.short
    return out


def median(rows: list[dict]) -> dict:
    """The median of each figure over the rounds."""
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


def main() -> None:
    """Start the cluster, measure both modes in alternating rounds, print JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    logs.configure("warning", "json", stream=sys.stderr)  # stdout is the JSON
    visits = 300 if args.quick else 2000
    root = Path(tempfile.mkdtemp(prefix="bench-wait-"))
    cluster = RedisCluster(root)
    try:
        url = cluster.url(cluster.ports[0])
        base = Settings(redis_url=url, secret="bench-secret-0123456789", geoip_db=None)
        client = store.connect(base)
        rows: dict[str, list] = {"off": [], "wait_1": []}
        for r in range(ROUNDS):
            for mode in rows:  # alternating, so drift hits both alike
                keys = Keys(f"benchwait{r}{mode.replace('_', '')}")
                wait = Wait(1, 1000) if mode == "wait_1" else None
                rows[mode].append(measure(client, keys, base.replace(namespace=keys.namespace), wait, visits,
                                          seed=r))
                for k in list(client.scan_iter(match=keys.match_all, count=1000)):
                    client.delete(k)
        off, on = median(rows["off"]), median(rows["wait_1"])
        print(json.dumps({
            "cluster": "3 masters + 3 replicas on loopback", "peers_per_visit": PEERS, "visits_per_round": visits,
            "rounds": ROUNDS, "concurrency": CONCURRENCY, "off": off, "wait_1": on,
            "ratio_wait_1_to_off": {k: round(on[k] / off[k], 3) for k in off if off[k]},
            "runs": rows,
        }, indent=2))
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
