"""``/metrics``: the crawl's figures in the Prometheus / OpenMetrics text format (SPEC §10).

A custom collector reads ``queue_report`` (what ``status --json`` prints)
and the outbox backlog at scrape time, so the workers' hot path is not
touched and the values equal ``status --json`` taken at the same moment.
Labels are bounded: a queue ``state`` (four values), a tracker ``url`` (the
trackers in use, tens) and a ``worker`` id (live processes); nothing per
torrent or per IP.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from crawler.dashboard.views import Views

STATES = ("ready", "cooling", "in_flight", "evicted")


class CrawlCollector:
    """Collects from ``views`` (a ``Views``) at every scrape."""

    def __init__(self, views: Views):
        self.views = views

    def describe(self):
        return []  # values come from Redis at scrape time; no scrape at registration

    def collect(self):
        v = self.views
        ops = v.operators(hours=1)
        r = ops["status"]
        g = GaugeMetricFamily("peercrawl_torrents", "Torrents per queue state (status --json).", labels=["state"])
        for s in STATES:
            g.add_metric([s], r[s])
        yield g
        yield GaugeMetricFamily("peercrawl_torrents_tracked", "Tracked torrents: ready, cooling or in flight.",
                                value=r["tracked"])
        yield GaugeMetricFamily("peercrawl_queue_latency_seconds",
                                "Age of the oldest ready torrent past its due time.", value=r["queue_latency_s"])
        yield GaugeMetricFamily("peercrawl_visits_last_hour", "Visits completed in the last hour.",
                                value=r["visits_last_hour"])
        yield GaugeMetricFamily("peercrawl_failed_visits_last_hour",
                                "Visits in the last hour where no source answered.",
                                value=r["failed_visits_last_hour"])
        yield GaugeMetricFamily("peercrawl_workers", "Live worker processes.", value=len(r["workers"]))
        conc = GaugeMetricFamily("peercrawl_worker_concurrency", "Visits at a time of each live worker.",
                                 labels=["worker"])
        for w in r["workers"]:
            if isinstance(w.get("concurrency"), (int, float)):
                conc.add_metric([str(w["id"])], w["concurrency"])
        yield conc
        needed = (r.get("capacity") or {}).get("workers_needed")
        if needed is not None:
            yield GaugeMetricFamily("peercrawl_workers_needed",
                                    "Workers needed to visit every tracked torrent once per revisit interval.",
                                    value=needed)
        answers = CounterMetricFamily("peercrawl_tracker_answers", "Answers of each tracker.", labels=["url"])
        failures = CounterMetricFamily("peercrawl_tracker_failures", "Failures of each tracker.", labels=["url"])
        backing = GaugeMetricFamily("peercrawl_tracker_backing_off", "1 while a tracker is backed off.",
                                    labels=["url"])
        for url, h in sorted(r["trackers"].items()):
            answers.add_metric([url], h["answers"])
            failures.add_metric([url], h["failures"])
            backing.add_metric([url], 1 if h["backing_off"] else 0)
        yield answers
        yield failures
        yield backing
        out = ops["outbox"]
        yield GaugeMetricFamily("peercrawl_stathat_outbox_stats",
                                "StatHat stats waiting to be posted (outbox and the batch in flight).",
                                value=out["stats_waiting"] + out["stats_in_flight"])
        mem = GaugeMetricFamily("peercrawl_redis_used_memory_bytes", "Redis used_memory per node.",
                                labels=["node"])
        for row in ops["redis"]:
            mem.add_metric([row["node"]], row["used_memory_bytes"])
        yield mem


def registry_for(views: Views) -> CollectorRegistry:
    """A registry holding only the crawl collector (no process metrics of the dashboard itself)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CrawlCollector(views))
    return reg
