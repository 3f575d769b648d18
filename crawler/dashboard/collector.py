"""``/metrics``: the crawl's figures in the Prometheus / OpenMetrics text format (contract §10).

A custom collector reads ``queue_report`` (what ``status --json`` prints)
and the outbox backlog at scrape time, so the workers' hot path is not
touched and the values equal ``status --json`` taken at the same moment.
Labels are bounded: a queue ``state`` (five values), a tracker ``url``
(the ``Settings.top_trackers`` busiest trackers of ``status --json`` and ``other``
for the sum of all the rest, however many trackers the torrents name), a
``worker`` id (live processes) and a Redis ``node``; nothing per torrent or
per IP. Every ``url`` is the redacted one ``status --json`` keys trackers by
(crawler/redact.py): no passkey, userinfo or query ever lands in a
label. The quarantined torrents' list is per torrent, so only its count is
here (the operators page lists them).

What the visits cost the sources (``status --json``'s ``costs``) are the
namespace's gauges over the last hour: tracker requests per second by
``kind`` (four values), DHT lookups per second, requests per visit and pairs
counted per 1,000 requests. Per tracker they are the operators page's and
``status``'s (and each worker's own counters): ``kind`` times ``url`` would
be four more series per tracker family.

Texts (a tracker's last refusal, the last GeoIP error) are ``_info`` metrics:
one series per tracker (or one), the redacted message a label, capped by
``tracker_health`` at 300 characters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from crawler.dashboard.views import Views
from crawler.queue.view import STATES


class CrawlCollector:
    """Collects from ``views`` (a ``Views``) at every scrape."""

    def __init__(self, views: Views):
        self.views = views

    def describe(self):
        """No metrics at registration: describing them would read Redis before the first scrape."""
        return []  # values come from Redis at scrape time; no scrape at registration

    def collect(self):
        """The crawl's gauges and counters, read from Redis through ``views`` at this scrape."""
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
        yield from _trackers(r["trackers"], r.get("trackers_other"))
        yield from _announce_cap(r.get("announce_cap"))
        yield from _costs(r["costs"])
        yield from _rates(r["rates"])
        yield from _coverage(r["coverage"])
        geo = r.get("geo_errors") or {}
        kinds = geo.get("kinds") or {"read_error": geo.get("errors", 0)}
        yield CounterMetricFamily("peercrawl_geoip_read_errors", "GeoIP database read errors (status geo_errors).",
                                  value=kinds.get("read_error", 0))
        yield CounterMetricFamily("peercrawl_geoip_names_too_long",
                                  "GeoIP names over a metric name's bound, counted as unknown (status geo_errors).",
                                  value=kinds.get("name_too_long", 0))
        if geo.get("at") is not None:
            yield GaugeMetricFamily("peercrawl_geoip_last_read_error_timestamp_seconds",
                                    "When the last GeoIP read error happened.", value=geo["at"])
        if geo.get("last"):
            yield InfoMetricFamily("peercrawl_geoip_last_read_error", "The last GeoIP read error.",
                                   value={"message": geo["last"]})
        yield GaugeMetricFamily("peercrawl_redis_evicting_keys",
                                "1 when Redis's maxmemory-policy evicts keys (status eviction_warning).",
                                value=0 if r.get("eviction_warning") is None else 1)
        out = ops["outbox"]
        yield GaugeMetricFamily("peercrawl_stathat_outbox_stats",
                                "StatHat stats waiting to be posted (outbox and the batch in flight).",
                                value=out["stats_waiting"] + out["stats_in_flight"])
        mem = GaugeMetricFamily("peercrawl_redis_used_memory_bytes", "Redis used_memory per node.",
                                labels=["node"])
        for row in ops["redis"]:
            mem.add_metric([row["node"]], row["used_memory_bytes"])
        yield mem


def _rates(rates: dict):
    """The queue's operator rates over the last hour (status --json rates); a rate with nothing to
    divide by is left out."""
    for name, key, what in (("claim_serve_ratio", "claim_serve_rate", "Torrents handed out / asked for by claims"),
                            ("reclaim_ratio", "reclaim_rate", "Leases expired before completion / handed out")):
        if rates[key] is not None:
            yield GaugeMetricFamily(f"peercrawl_{name}", what + ", last hour.", value=rates[key])
    rt = rates["visit_round_trip_s"]
    if rt["visits"]:
        g = GaugeMetricFamily("peercrawl_visit_round_trip_seconds",
                              "Claim to completion of the last hour's visits, by quantile (±4.5 %).",
                              labels=["quantile"])
        g.add_metric(["0.5"], rt["p50"])
        g.add_metric(["0.95"], rt["p95"])
        yield g


def _coverage(cov: dict):
    """The catalogue's coverage over the last hour (status --json coverage; docs/metrics.md, "Coverage")."""
    yield GaugeMetricFamily("peercrawl_coverage_counted_ips",
                            "Distinct IPs counted by the last hour's visits that had a reported swarm size.",
                            value=cov["counted"])
    yield GaugeMetricFamily("peercrawl_coverage_reported_peers",
                            "Swarm sizes (seeders + leechers) the sources reported on those visits.",
                            value=cov["reported"])
    if cov["coverage"] is not None:
        yield GaugeMetricFamily("peercrawl_coverage_ratio", "Counted / reported over the last hour's visits.",
                                value=cov["coverage"])


def _announce_cap(cap: dict | None):
    """The announce cap's families (none without a cap): the namespace's, then one series per capped tracker."""
    if not cap:
        return
    allowed = GaugeMetricFamily("peercrawl_announce_cap_per_second",
                                "Tracker requests per second allowed (namespace: url=\"\"; else that tracker).",
                                labels=["url"])
    sent = GaugeMetricFamily("peercrawl_announce_cap_sent_per_second",
                             "Tracker requests per second sent over the last minute and this one.", labels=["url"])
    limiting = GaugeMetricFamily("peercrawl_announce_cap_limiting",
                                 "1 while the cap holds most requests back (visits wait for it).", labels=["url"])
    for url, c in [("", cap)] + sorted(cap["trackers"].items()):
        if c["per_second"]:
            allowed.add_metric([url], c["per_second"])
        sent.add_metric([url], c["sent_per_second"])
        limiting.add_metric([url], 1 if c["limiting"] else 0)
    yield allowed
    yield sent
    yield limiting


def _costs(c: dict):
    """What the visits cost the sources over the last hour (status --json costs), the namespace's figures."""
    kinds = [k for k in c["per_second"] if k != "total"]
    total = GaugeMetricFamily("peercrawl_tracker_requests_per_second",
                              "Requests sent to every tracker per second over the last hour, by kind.", labels=["kind"])
    for k in kinds:
        total.add_metric([k], c["per_second"][k])
    yield total
    yield GaugeMetricFamily("peercrawl_dht_lookups_per_second", "DHT lookups that traversed, per second, last hour.",
                            value=c["dht_lookups_per_second"])
    if c["requests_per_visit"] is not None:
        yield GaugeMetricFamily("peercrawl_tracker_requests_per_visit",
                                "Tracker requests per visit completed, last hour.", value=c["requests_per_visit"])
    if c["counted_per_1000_requests"] is not None:
        yield GaugeMetricFamily("peercrawl_pairs_counted_per_1000_tracker_requests",
                                "(IP, torrent) pairs counted new per 1,000 tracker requests, last hour.",
                                value=c["counted_per_1000_requests"])


# The url label of every tracker past the busiest (no tracker URL is a bare word).
OTHER = "other"


def _trackers(trackers: dict, other: dict | None = None):
    """The families of tracker health: one series per shown (redacted) tracker URL, and the
    counters' sums over every other tracker as ``url="other"``."""
    answers = CounterMetricFamily("peercrawl_tracker_answers", "Answers of each tracker.", labels=["url"])
    failures = CounterMetricFamily("peercrawl_tracker_failures", "Failures of each tracker.", labels=["url"])
    refusals = CounterMetricFamily("peercrawl_tracker_refusals",
                                   "Announces a tracker answered with an error (failure reason).", labels=["url"])
    cut = CounterMetricFamily("peercrawl_tracker_peers_cut",
                              "Peers dropped from a tracker's replies past the per-source bound.", labels=["url"])
    backing = GaugeMetricFamily("peercrawl_tracker_backing_off", "1 while a tracker is backed off.", labels=["url"])
    until = GaugeMetricFamily("peercrawl_tracker_backoff_until_timestamp_seconds",
                              "When a backed-off tracker is tried again.", labels=["url"])
    cap = GaugeMetricFamily("peercrawl_tracker_learned_cap_peers",
                            "Most peers a tracker hands out per reply, as learned (trackers seen capping).",
                            labels=["url"])
    used = GaugeMetricFamily("peercrawl_tracker_last_used_timestamp_seconds",
                             "When a worker last wrote the tracker's health.", labels=["url"])
    refusal = InfoMetricFamily("peercrawl_tracker_last_refusal", "The last refusal message of a tracker (redacted).",
                               labels=["url"])
    for url, h in sorted(trackers.items()):
        answers.add_metric([url], h["answers"])
        failures.add_metric([url], h["failures"])
        refusals.add_metric([url], h["refusals"])
        cut.add_metric([url], h["peers_cut"])
        backing.add_metric([url], 1 if h["backing_off"] else 0)
        if h["until"] is not None:
            until.add_metric([url], h["until"])
        if h["learned_cap"] is not None:
            cap.add_metric([url], h["learned_cap"])
        if isinstance(h.get("last_used"), (int, float)):
            used.add_metric([url], h["last_used"])
        if h["last_refusal"]:
            refusal.add_metric([url], {"message": h["last_refusal"]})
    if other and other.get("trackers"):
        answers.add_metric([OTHER], other["answers"])
        failures.add_metric([OTHER], other["failures"])
        refusals.add_metric([OTHER], other["refusals"])
        cut.add_metric([OTHER], other["peers_cut"])
    yield from (answers, failures, refusals, cut, backing, until, cap, used, refusal)
    yield GaugeMetricFamily("peercrawl_trackers", "Trackers in tracker health (shown one by one or summed as other).",
                            value=len(trackers) + (other or {}).get("trackers", 0))


def registry_for(views: Views) -> CollectorRegistry:
    """A registry holding only the crawl collector (no process metrics of the dashboard itself)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CrawlCollector(views))
    return reg
