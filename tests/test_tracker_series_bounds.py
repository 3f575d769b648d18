"""A catalogue naming many trackers leaves tracker health, status and /metrics bounded.

Five magnets name 64 distinct trackers each (320 loopback UDP ports nobody
listens on: each announce fails within the UDP timeout); a real worker
visits them all. Tracker health then holds the 320 trackers the torrents
name, status and the operators page show the busiest ``TOP`` and
the others' sums, the dashboard's /metrics and the worker's own /metrics
carry at most ``TOP`` tracker labels and ``other``; once four of
the torrents are evicted, pruning leaves the 64 trackers the fifth names.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from crawler.dashboard.app import create_app
from crawler.dashboard.views import Views
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.settings import Settings
from crawler.sources.trackers.health import TrackerHealth
from tests.cli import run
from tests.opentracker import free_port

TOP = Settings().top_trackers

TORRENTS, PER_TORRENT = 5, 64


def _closed_udp_ports(n: int) -> list[int]:
    """``n`` distinct loopback UDP ports, each bound once by the system then let go (nobody listens)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _samples(text: str) -> list:
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def test_320_named_trackers_leave_health_status_and_metrics_bounded(test_env, client, keys, settings):
    ports = _closed_udp_ports(TORRENTS * PER_TORRENT)
    urls = [f"udp://127.0.0.1:{p}/announce" for p in ports]
    hashes = [hashlib.sha1(f"series-bounds-{i}".encode()).hexdigest() for i in range(TORRENTS)]
    magnets = ["magnet:?xt=urn:btih:" + h + "".join(
        "&tr=" + urllib.parse.quote(u, safe="") for u in urls[i * PER_TORRENT:(i + 1) * PER_TORRENT])
        for i, h in enumerate(hashes)]
    added = run(test_env, "add", *magnets)
    assert added.returncode == 0, added.stderr
    web = create_app(Views(client, keys, settings)).test_client()
    before = web.get("/metrics").get_data(as_text=True).count("\n")

    port = free_port()
    env = dict(test_env, PEERCRAWL_METRICS_PORT=str(port), PEERCRAWL_UDP_TIMEOUT="0.5", PEERCRAWL_UDP_RETRIES="1")
    p = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", str(TORRENTS),
                          "--duration", "40"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        worker_text, announced = "", 0
        end = time.monotonic() + 35
        while time.monotonic() < end:
            try:
                worker_text = _scrape(port)
            except OSError:
                worker_text = ""
            # each tracker asked once: announced to, or settled by its scrape (these ports are closed)
            announced = sum(s.value for s in _samples(worker_text)
                            if s.name == "peercrawl_worker_tracker_announces_total"
                            or s.name == "peercrawl_worker_tracker_scrapes_total" and s.labels["outcome"] != "announce")
            if announced >= len(urls):
                break
            time.sleep(0.3)
        assert announced == len(urls), "the worker did not announce to every tracker in time"
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err[-2000:]

    # the worker's own /metrics: its first TOP trackers by name, every later one as "other"
    # (every tracker here is a closed port: its scrape fails, so each is asked once, by scrape; the
    # announces share the same labels)
    worker_labels = {s.labels["url"] for s in _samples(worker_text)
                     if s.name == "peercrawl_worker_tracker_scrapes_total"}
    assert len(worker_labels) == TOP + 1 and "other" in worker_labels
    # bounded: the families above, and the requests sent by url and kind (four kinds, each with _created)
    assert worker_text.count("\n") < 150 + 2 * 4 * (TOP + 1)

    # tracker health holds what the torrents name, no more
    assert client.hlen(keys.tracker_health) == len(urls)
    status = json.loads(run(test_env, "status", "--json").stdout)
    shown, other = status["trackers"], status["trackers_other"]
    assert len(shown) == TOP and other["trackers"] == len(urls) - TOP
    assert sum(x["failures"] for x in shown.values()) + other["failures"] == len(urls)
    text = run(dict(test_env, COLUMNS="200"), "status").stdout
    assert f"{len(urls) - TOP} other trackers" in text
    assert sum(u in text for u in urls) == TOP

    # the operators page shows the same busiest trackers
    page = web.get("/api/operators").get_json()
    rows = [row["tracker"] for row in page["tables"]["trackers"]]
    assert set(rows[:-1]) == set(shown) and rows[-1] == f"{len(urls) - TOP} other trackers"

    # the dashboard's /metrics: TOP series per tracker family and one "other"
    metrics = web.get("/metrics").get_data(as_text=True)
    answers = [s for s in _samples(metrics) if s.name == "peercrawl_tracker_failures_total"]
    assert len(answers) == TOP + 1
    assert {s.labels["url"] for s in answers} == set(shown) | {"other"}
    assert sum(s.value for s in answers) == len(urls)
    lines = metrics.count("\n")
    # before the crawl: no tracker; after: a bounded number of tracker series (9 families of at most
    # TOP + 1), whatever the 320 trackers
    assert lines - before <= 9 * (TOP + 1) + 20, (before, lines)

    # four torrents evicted: pruning (their trackers a period unused) leaves the fifth's 64
    q = Queue(client, keys, settings.replace(evict_below=0.9))
    later = time.time() + settings.retry_seconds + 1
    leases = {}
    for _ in range(10):
        leases.update({x.info_hash: x for x in q.claim(TORRENTS, now=later)})
    assert set(leases) == set(hashes)
    for h in hashes[:-1]:
        assert q.complete(leases[h], Outcome.NONE, now=later)[0] == "evicted"
    health = TrackerHealth(client, keys, prune_after=60.0)
    assert health.prune(now=time.time() + 61) == len(urls) - PER_TORRENT
    assert client.hlen(keys.tracker_health) == PER_TORRENT == client.zcard(keys.tracker_rank)
    left = {u.decode() for u in client.hkeys(keys.tracker_health)}
    assert left == set(urls[-PER_TORRENT:])
