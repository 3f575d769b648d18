"""``PEERCRAWL_METRICS_PORT``: a worker crawling a real opentracker serves its own /metrics."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from crawler import redact
from tests.cli import run
from tests.opentracker import free_port, opentracker, peer_address  # noqa: F401 (fixture)
from workers.visit_stages import SLOT, STAGES

PASSKEY = "0123456789abcdef0123456789abcdef"


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_worker_metrics_count_a_real_crawl(test_env, opentracker):  # noqa: F811 (fixture)
    ih = hashlib.sha1(b"worker-metrics").hexdigest()
    ot = opentracker([ih])
    for i in range(5):
        ot.announce_from(peer_address(i), ih, 6881)
    # a private tracker's URL: the passkey (a path segment, BEP 41 URL data) must not reach a label
    url = ot.udp_url.rsplit("/", 1)[0] + f"/{PASSKEY}/announce"
    assert run(test_env, "add", f"magnet:?xt=urn:btih:{ih}&tr={urllib.parse.quote(url, safe='')}").returncode == 0
    port = free_port()
    env = dict(test_env, PEERCRAWL_METRICS_PORT=str(port))
    p = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "4", "--duration", "30"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        m: dict = {}
        end = time.monotonic() + 25
        while time.monotonic() < end:
            try:
                m = scrape(port)
            except OSError:
                m = {}
            if m.get(("peercrawl_worker_visits_total", (("state", "cooling"),))):
                break
            time.sleep(0.3)
        info = json.loads(run(test_env, "torrent", ih, "--json").stdout)
        users = json.loads(run(test_env, "stats", "torrents", "--torrent", ih, "--json").stdout)
        assert m[("peercrawl_worker_visits_total", (("state", "cooling"),))] == info["visits"] == 1
        assert m[("peercrawl_worker_peers_found_total", ())] == info["peers_last_visit"] == 5
        assert m[("peercrawl_worker_peers_new_total", ())] == (users[0]["count"] if users else 0)
        assert m[("peercrawl_worker_tracker_announces_total", (("outcome", "answered"), ("url", redact.url(url))))] == 1
        # scraped first: the swarm has peers, so the tracker was announced to
        assert m[("peercrawl_worker_tracker_scrapes_total", (("outcome", "announce"), ("url", redact.url(url))))] == 1
        assert PASSKEY not in str(m) and "<redacted:" in redact.url(url)
        assert m[("peercrawl_worker_recording_seconds_count", ())] == 1
        # the visit's slot, stage by stage: each stage a settled visit passes, once
        assert {st: m.get(("peercrawl_worker_visit_stage_seconds_count", (("stage", st),))) for st in (*STAGES, SLOT)} \
            == dict.fromkeys((*STAGES, SLOT), 1)
        # the whole slot is the sum of the stages
        sums = {st: m[("peercrawl_worker_visit_stage_seconds_sum", (("stage", st),))] for st in STAGES}
        assert m[("peercrawl_worker_visit_stage_seconds_sum", (("stage", SLOT),))] == pytest.approx(sum(sums.values()))
        # what the visit cost the tracker: one connect, the scrape, the announce and its withdrawal
        assert {k: m[("peercrawl_worker_tracker_requests_total", (("kind", k), ("url", redact.url(url))))]
                for k in ("connect", "scrape", "announce", "withdrawal")} == dict.fromkeys(
            ("connect", "scrape", "announce", "withdrawal"), 1)
        assert m[("peercrawl_worker_dht_traversals_total", ())] == 0
        assert m[("peercrawl_worker_claim_seconds_count", (("call", "claim"),))] >= 1
        assert m[("peercrawl_worker_pool_size", ())] == 4
        # labels stay bounded: no info-hash, no peer address
        assert not any(ih in str(k) or "127.1." in str(k) for k in m)
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err[-2000:]
    # and the worker says so as it stops, with each stage's median
    stopped = next(json.loads(line) for line in err.splitlines() if '"worker_stopped"' in line)
    assert set(stopped["stages"]) == {*STAGES, SLOT}
    assert all(s["visits"] == 1 and s["p50_ms"] > 0 for s in stopped["stages"].values())
    # the one visit's peers, recorded in one batch; a first visit is never settled by a swarm record
    assert stopped["recordings"] == {"batches": 1, "peers": 5, "swarms_known": 0}
    assert stopped["completions"] == {"batches": 1, "visits": 1}
    # written by the worker's clean stop (SIGTERM) at the latest, for status to show
    costs = json.loads(run(test_env, "status", "--json").stdout)["costs"]
    assert costs["requests"] == {"connect": 1, "scrape": 1, "announce": 1, "withdrawal": 1, "total": 4}
    assert costs["counted"] == (users[0]["count"] if users else 0) == 5


def test_a_tracker_known_not_to_scrape_is_observed_as_announce_without_a_scrape(settings, client, keys):
    """Settled before any scrape (it learned it cannot scrape): the observer still hears the outcome."""
    from crawler.observer import Observer
    from crawler.sources.trackers.trackers import Trackers

    class Heard(Observer):
        def __init__(self):
            self.scraped_ = []

        def scraped(self, url, result):
            self.scraped_.append((url, result))

    heard, url = Heard(), "http://127.0.0.1:9/announce"
    trackers = Trackers(settings.replace(scrape_first=True), client, keys, observer=heard)
    try:
        trackers.health.learn_no_scrape(url, time.time() + 3600)
        assert trackers.scrape_seat(url, "ab" * 20, 1.0) is None
        assert heard.scraped_ == [(url, None)]
    finally:
        trackers.close()
