"""The hardening's figures on the dashboard: quarantined torrents, tracker refusals, cut peers, learned
caps, GeoIP read errors and the eviction warning, on the operators JSON and ``/metrics``, each
compared with ``status --json``; no tracker secret in any label or page.

Everything is written by the real code: ``TrackerHealth.record`` for the trackers, the real
``Queue`` (claim, expire, housekeep) for the quarantine, a ``Recorder`` over a damaged GeoIP
database for the read errors, a private Redis with an evicting policy for the warning.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import urllib.parse

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

import geo
from crawler.counters import Recorder
from crawler.dashboard.app import create_app
from crawler.dashboard.views import Views
from crawler.queue.queue import Queue
from crawler.sources.trackers.health import ANSWER, FAILURE, REFUSAL, TrackerHealth
from crawler.torrents.items import NewItem
from tests.cli import run
from tests.dashboard_data import record_world
from tests.test_connect import private_redis  # noqa: F401 (fixture)
from tests.test_geo import damaged_networks, write_damaged_city_db

PASSKEY = "0123456789abcdef0123456789abcdef"
PRIVATE = f"http://tracker.example:2710/{PASSKEY}/announce?passkey=s3cr3tKEY99&uid=7"
USERINFO = "https://alice:hunter2hunter2@tracker.example/announce"
PUBLIC = "udp://127.0.0.1:6969/announce"
DOWN = "http://127.0.0.1:1/announce"
SECRETS = (PASSKEY, "s3cr3tKEY99", "uid=7", "alice", "hunter2hunter2")
POISON = hashlib.sha1(b"poison").hexdigest()


def families(web, openmetrics: bool = False) -> dict:
    if openmetrics:
        text = web.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}).get_data(
            as_text=True)
        return {f.name: f for f in om_parse(text)}
    text = web.get("/metrics").get_data(as_text=True)
    return {f.name: f for f in text_string_to_metric_families(text)}


def info(fams: dict, name: str) -> list:
    """The samples of info metric ``name`` (OpenMetrics keeps the family name, text format adds ``_info``)."""
    return (fams.get(name) or fams[name + "_info"]).samples


def by_url(fams: dict, name: str, sample: str | None = None) -> dict:
    return {s.labels["url"]: s.value for s in fams[name].samples if sample is None or s.name == sample}


def harden(client, keys, settings, tmp_path) -> None:
    """Write every hardening figure with the real code: tracker health with refusals, a cut and a
    learned cap (some URLs with secrets), one quarantined torrent (``POISON``), GeoIP read errors."""
    health = TrackerHealth(client, keys, flush=0.0)
    for _ in range(3):
        health.record(PRIVATE, REFUSAL, message=f"unregistered torrent for {PRIVATE} (passkey s3cr3tKEY99)")
    health.record(PRIVATE, ANSWER, cut=12, returned=50, capped=True)
    health.record(USERINFO, ANSWER, cut=0, returned=3)
    health.record(PUBLIC, ANSWER, cut=4, returned=20)
    for _ in range(4):
        health.record(DOWN, FAILURE)
    health.flush()
    # a torrent whose lease lapses once is quarantined (quarantine_after=1)
    q = Queue(client, keys, settings.replace(quarantine_after=1, lease_seconds=10))
    now = time.time()
    q.add([NewItem(POISON)], now=now - 1)
    (lease,) = q.claim(1, now=now)
    assert lease.info_hash == POISON
    q.housekeep(now=now + 11)
    # GeoIP read errors from a damaged database
    nets, _, bad_codes = damaged_networks(9)
    rec = Recorder(client, keys, settings, geo.open_locator(write_damaged_city_db(tmp_path / "bad.mmdb", nets,
                                                                                  bad_codes)))
    rec.record_visit("ee" * 20, [f"127.1.0.{i + 1}" for i in range(9)], int(now))


@pytest.fixture
def hardened(client, keys, settings, tmp_path):
    """The dashboard's small world plus every hardening figure."""
    record_world(client, keys, settings, tmp_path)
    harden(client, keys, settings, tmp_path)
    return create_app(Views(client, keys, settings)).test_client()


def test_operators_json_shows_the_hardening_as_status_does(hardened, test_env):
    d = hardened.get("/api/operators").get_json()
    status = json.loads(run(test_env, "status", "--json").stdout)
    s = d["status"]
    for k in ("quarantined", "quarantined_torrents", "geo_errors", "eviction_warning", "trackers"):
        assert s[k] == status[k], k
    assert s["quarantined"] == 1 and s["quarantined_torrents"][0]["info_hash"] == POISON
    assert {r["state"]: r["count"] for r in d["tables"]["states"]}["quarantined"] == 1
    (row,) = d["tables"]["quarantined"]
    assert row["info_hash"] == POISON and "lease expired 1 time" in row["reason"]
    assert row["reason"] == status["quarantined_torrents"][0]["reason"]
    assert s["geo_errors"]["errors"] == 3 and "InvalidDatabaseError" in s["geo_errors"]["last"]
    rows = {r["tracker"]: r for r in d["tables"]["trackers"]}
    assert set(rows) == set(status["trackers"])
    for url, t in status["trackers"].items():
        for k in ("answers", "failures", "refusals", "last_refusal", "peers_cut", "learned_cap", "backing_off"):
            assert rows[url][k] == t[k], (url, k)
    private = next(u for u in rows if u.startswith("http://tracker.example"))
    assert rows[private]["refusals"] == 3 and rows[private]["learned_cap"] == 50 and rows[private]["peers_cut"] == 12
    assert "unregistered torrent" in rows[private]["last_refusal"]
    csv_text = hardened.get("/api/operators?format=csv&table=quarantined").get_data(as_text=True)
    assert POISON in csv_text and "lease expired" in csv_text
    page = json.dumps(d) + hardened.get("/api/operators?format=csv&table=trackers").get_data(as_text=True)
    for secret in SECRETS:
        assert secret not in page, secret


@pytest.mark.parametrize("openmetrics", [False, True])
def test_metrics_show_every_hardening_figure_of_status(hardened, test_env, openmetrics):
    fams = families(hardened, openmetrics)
    status = json.loads(run(test_env, "status", "--json").stdout)
    trackers = status["trackers"]
    states = {s.labels["state"]: s.value for s in fams["peercrawl_torrents"].samples}
    assert states == {k: status[k] for k in ("ready", "cooling", "in_flight", "quarantined", "evicted")}
    assert states["quarantined"] == 1
    assert by_url(fams, "peercrawl_tracker_refusals", "peercrawl_tracker_refusals_total") == {
        u: t["refusals"] for u, t in trackers.items()}
    assert by_url(fams, "peercrawl_tracker_peers_cut", "peercrawl_tracker_peers_cut_total") == {
        u: t["peers_cut"] for u, t in trackers.items()}
    assert by_url(fams, "peercrawl_tracker_answers", "peercrawl_tracker_answers_total") == {
        u: t["answers"] for u, t in trackers.items()}
    assert by_url(fams, "peercrawl_tracker_failures", "peercrawl_tracker_failures_total") == {
        u: t["failures"] for u, t in trackers.items()}
    assert by_url(fams, "peercrawl_tracker_learned_cap_peers") == {
        u: t["learned_cap"] for u, t in trackers.items() if t["learned_cap"] is not None}
    assert by_url(fams, "peercrawl_tracker_backoff_until_timestamp_seconds") == pytest.approx({
        u: t["until"] for u, t in trackers.items() if t["until"] is not None})
    assert by_url(fams, "peercrawl_tracker_last_used_timestamp_seconds") == pytest.approx({
        u: t["last_used"] for u, t in trackers.items()})
    refusal = {s.labels["url"]: s.labels["message"] for s in info(fams, "peercrawl_tracker_last_refusal")}
    assert refusal == {u: t["last_refusal"] for u, t in trackers.items() if t["last_refusal"]}
    assert len(refusal) == 1 and [v for v in by_url(fams, "peercrawl_tracker_learned_cap_peers").values()] == [50]
    geo_errors = fams["peercrawl_geoip_read_errors"].samples
    assert [s.value for s in geo_errors if s.name == "peercrawl_geoip_read_errors_total"] == [
        status["geo_errors"]["errors"]] == [3]
    assert fams["peercrawl_geoip_last_read_error_timestamp_seconds"].samples[0].value == status["geo_errors"]["at"]
    assert info(fams, "peercrawl_geoip_last_read_error")[0].labels["message"] == status["geo_errors"]["last"]
    assert fams["peercrawl_redis_evicting_keys"].samples[0].value == (status["eviction_warning"] is not None)


def test_no_tracker_secret_in_any_metrics_label(hardened):
    for openmetrics in (False, True):
        fams = families(hardened, openmetrics)
        urls = {s.labels["url"] for f in fams.values() for s in f.samples if "url" in s.labels}
        assert len(urls) == 4
        for u in urls:
            parts = urllib.parse.urlsplit(u)
            assert "@" not in parts.netloc or re.fullmatch(r"<redacted:[0-9a-f]{6}>@.*", parts.netloc), u
            assert parts.query == "" or re.fullmatch(r"<redacted:[0-9a-f]{6}>", parts.query), u
            assert not parts.fragment, u
        for f in fams.values():
            for s in f.samples:
                for secret in SECRETS:
                    assert secret not in json.dumps(s.labels), (secret, s)
        text = hardened.get("/metrics").get_data(as_text=True)
        for secret in SECRETS:
            assert secret not in text, secret


def test_pruned_trackers_leave_the_labels(client, keys, settings):
    """The url label set follows tracker health, whose unused entries are pruned."""
    health = TrackerHealth(client, keys, flush=0.0, prune_after=60.0)
    health.record(PRIVATE, ANSWER, returned=3)
    health.flush()
    web = create_app(Views(client, keys, settings)).test_client()
    assert len(by_url(families(web), "peercrawl_tracker_answers", "peercrawl_tracker_answers_total")) == 1
    assert health.prune(now=time.time() + 3600) == 1
    assert by_url(families(web), "peercrawl_tracker_answers", "peercrawl_tracker_answers_total") == {}


def test_eviction_warning_on_the_page_and_in_metrics(private_redis, test_env, keys, settings):  # noqa: F811
    import redis as redis_lib

    url, _ = private_redis
    client = redis_lib.Redis.from_url(url)
    try:
        web = create_app(Views(client, keys, settings)).test_client()
        status = json.loads(run(dict(test_env, REDIS_URL=url), "status", "--json").stdout)
        d = web.get("/api/operators").get_json()
        assert d["status"]["eviction_warning"] == status["eviction_warning"]
        assert "allkeys-lru" in d["status"]["eviction_warning"]
        assert families(web)["peercrawl_redis_evicting_keys"].samples[0].value == 1
    finally:
        client.close()


def test_the_torrent_page_shows_its_trackers_redacted_as_torrent_json(hardened, client, keys, settings, test_env):
    Queue(client, keys, settings).add([NewItem(POISON, (PRIVATE, USERINFO, PUBLIC))], readmit=True)
    d = hardened.get(f"/api/torrent/{POISON}").get_json()
    info = json.loads(run(test_env, "torrent", POISON, "--json").stdout)
    assert d["torrent"]["trackers"] == info["trackers"] and len(info["trackers"]) == 3
    assert d["torrent"]["tracker_not_before"] == info["tracker_not_before"]
    for secret in SECRETS:
        assert secret not in json.dumps(d), secret
