"""The operators' view of a crawl: queue states, throughput, workers, trackers.

``queue_report`` gathers what ``peercrawl status`` shows (contract §7) from the
owners of each part: the queue's read model (``QueueView``), the worker
registry, tracker health (the busiest trackers and the others' sums), GeoIP
errors, how full the mark buckets are, the server's eviction policy and what
the visits cost the sources (``costs``).
On the way it drops per-minute visit counts older than two days
(``Queue.trim_visit_buckets``) and the entries of workers whose heartbeat
expired, so neither grows while no worker runs long enough to trim.
"""

from __future__ import annotations

import math

from crawler.counters.geo_errors import geo_error_report
from crawler.counters.mark_fill import mark_fill_report
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.registry.worker_registry import WorkerRegistry
from crawler.report.costs import costs_report
from crawler.report.nodes import eviction_warning, node_report
from crawler.sources.cap_report import cap_report, plan_report
from crawler.sources.dht.discovery import discovery_report
from crawler.sources.trackers.health_report import tracker_others, tracker_report


def queue_report(queue: Queue, now: float) -> dict:
    """Everything ``status --json`` prints. Raises ``StoreError``."""
    c, k = queue.client, queue.keys
    view = QueueView(c, k)
    queue.trim_visit_buckets(now)
    report = view.counts(now)
    report["shards"] = {"queue": k.shards, "counters": k.counter_shards}
    report["quarantined_torrents"] = view.quarantined(10) if report.get("quarantined") else []
    report["visits_last_hour"] = view.visits_since(3600, now)
    report["failed_visits_last_hour"] = view.visits_since(3600, now, failed=True)
    report["rates"] = view.rates(now)
    report["coverage"] = view.coverage(now)
    report.update(view.at_risk(now))
    report["lanes"] = view.lanes(now, totals=report)
    workers = WorkerRegistry(c, k).live(now)
    report["workers"] = workers = sorted(workers, key=lambda w: (str(w.get("host", "")), w.get("pid", 0)))
    report["machines"] = machines(workers)
    # The busiest trackers one by one, the rest summed: bounded whatever the catalogue names.
    report["trackers"] = tracker_report(c, k, queue.settings.top_trackers)
    report["trackers_other"] = tracker_others(c, k, report["trackers"])
    report["geo_errors"] = geo_error_report(c, k)
    report["marks"] = mark_fill_report(c, k)
    report["redis"] = node_report(c)  # one INFO per node serves both
    report["eviction_warning"] = eviction_warning(report["redis"])
    report["announce_cap"] = cap_report(c, k, queue.settings, now)
    cap = report["announce_cap"]
    # the caps' requests per visit are over their own window: the visits of the same minutes
    report["plan"] = plan_report(cap, view.visits_since(cap["window_s"] + 1, now) if cap else 0,
                                 report["tracked"] - report.get("quarantined", 0), queue.settings.revisit_seconds)
    report["discovery"] = discovery_report(c, k, queue.settings, now)
    report["costs"] = costs_report(c, k, queue.settings.top_trackers, now, report["visits_last_hour"])
    size = queue.settings.pool_size() or queue.settings.concurrency_max  # auto: it may grow to its bound
    report.update(capacity_report(report, workers, queue.settings.revisit_seconds, size))
    return report


def capacity_report(report: dict, workers: list[dict], revisit_seconds: float, concurrency: int = 50) -> dict:
    """How many visits per hour the plan needs, and how many workers that takes.

    Needed (the plan): every tracked torrent but the quarantined (never
    claimed) once per revisit interval. What one worker can do, by the first
    basis that is known:

    - ``measured``: the workers' own recent visits per hour, when their pools
      are busy (in flight at least 80 % of their concurrency): then the
      rate is what a worker does, not what the catalogue leaves it;
    - ``pool``: its concurrency over the median visit's time in the last hour
      (each slot of the pool does one visit per round trip), when the pools
      have room (a crawl that leaves workers idle says nothing of their
      speed);
    - ``core``: what one core allows at the workers' CPU time per visit, when
      that is less than ``pool`` (a process runs on one core);
    - ``measured`` again, from the workers' rates, before any visit was timed.

    With no worker running there is no pool or core to measure (a round trip
    timed on loopback over the largest pool ``auto`` may grow to is no rate):
    unknown.

    ``workers_needed`` is None, with ``workers_needed_why`` saying why, when
    none is known (no visit yet) or the revisit interval is 0 (every torrent as
    often as a worker is free: no finite need). ``limited_by``: "announce cap"
    while the cap holds the visits back.
    """
    tracked = report["tracked"] - report.get("quarantined", 0)
    needed = tracked * 3600.0 / revisit_seconds if revisit_seconds else None
    per_worker, basis = _per_worker(report, workers, concurrency)
    needed_workers, why = None, None
    if needed is None:
        why = "the revisit interval is 0: every torrent is visited as often as a worker is free"
    elif per_worker is None:
        why = ("no worker is running: a worker's rate is measured while it runs" if not workers
               else "no visit timed in the last hour, and no worker reports a rate")
    else:
        assert basis is not None  # _per_worker gives a rate with its basis
        needed_workers = max(1, math.ceil(needed / per_worker))
        why = (f"the plan ({tracked:,} torrents every {revisit_seconds:g} s) over "
               + {"measured": "the workers' measured rate while busy",
                  "core": "what one core does at the workers' CPU time per visit",
                  "pool": "a worker's pool over the median visit time"}[basis])
    out: dict[str, object] = {
        "capacity": {
            "visits_needed_per_hour": None if needed is None else round(needed, 1),
            "visits_per_worker_hour": None if per_worker is None else round(per_worker, 1),
            "per_worker_basis": basis,
            "workers_needed": needed_workers,
            "workers_needed_why": why,
            # With the announce cap as the limit, more workers would only wait longer.
            "limited_by": "announce cap" if (report.get("announce_cap") or {}).get("limiting") else None,
        }
    }
    failing = [w["id"] for w in workers if w.get("failing")]
    if failing:
        out["outage"] = f"every visit failing on {len(failing)} of {len(workers)} workers: " + ", ".join(failing)
    return out


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _per_worker(report: dict, workers: list[dict], concurrency: int) -> tuple[float | None, str | None]:
    """Visits per hour one worker can do, and its basis (``capacity_report``)."""
    n = len(workers)
    rates = [r for r in (_number(w.get("visits_per_hour")) for w in workers) if r is not None]
    measured = sum(rates) / len(rates) if rates and sum(rates) > 0 else (report["visits_last_hour"] / n if n else None)
    sizes = [c for c in (_number(w.get("concurrency")) for w in workers) if c]
    busy = sum(_number(w.get("in_flight")) or 0 for w in workers)
    if measured and sizes and busy >= 0.8 * sum(sizes):
        return measured, "measured"
    p50 = ((report.get("rates") or {}).get("visit_round_trip_s") or {}).get("p50")
    if p50 and workers:
        pool = (sum(sizes) / len(sizes) if sizes else concurrency) * 3600.0 / p50
        cpu = sum(_number(w.get("cpu_s")) or 0 for w in workers)
        visits = sum(_number(w.get("visits")) or 0 for w in workers)
        if cpu > 0 and visits >= 10 and 3600.0 * visits / cpu < pool:
            return 3600.0 * visits / cpu, "core"
        return pool, "pool"
    return (measured, "measured") if measured else (None, None)


def machines(workers: list[dict]) -> list[dict]:
    """The live workers by machine (``peercrawl worker --processes N`` runs N on one), each machine's
    processes and their pools, visits in flight and visits per hour summed; by host name."""
    out: dict[str, dict] = {}
    for w in workers:
        m = out.setdefault(str(w.get("host", "")), {"host": str(w.get("host", "")), "processes": 0, "concurrency": 0,
                                                     "in_flight": 0, "visits_per_hour": 0.0})
        m["processes"] += 1
        for k in ("concurrency", "in_flight", "visits_per_hour"):
            v = w.get(k)
            if _number(v) is not None:  # a number, kept as it came (a pool's size stays an int)
                m[k] += v
    for m in out.values():
        m["visits_per_hour"] = round(m["visits_per_hour"], 1)
    return [out[h] for h in sorted(out)]
