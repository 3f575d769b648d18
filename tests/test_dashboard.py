"""The dashboard's JSON, CSV, token and /metrics on the real Redis, against the real commands.

Data is recorded by the real Recorder and Queue (tests/dashboard_data.py);
the numbers the dashboard serves are compared with what ``peercrawl stats
--json`` and ``status --json`` print in a subprocess.
"""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from crawler.dashboard.app import create_app
from crawler.dashboard.countries import CODE_OF, NAMES, map_code, shapes
from crawler.dashboard.views import Views
from tests.cli import run
from tests.dashboard_data import HASHES, record_world


@pytest.fixture
def world(client, keys, settings, tmp_path):
    return record_world(client, keys, settings, tmp_path)


@pytest.fixture
def web(client, keys, settings, world):
    return create_app(Views(client, keys, settings)).test_client()


def stats(env, *args) -> list[dict]:
    p = run(env, "stats", *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def pairs(rows) -> list[tuple]:
    return [(r["metric"], r["count"]) for r in rows]


def test_overview_equals_stats(web, test_env):
    for month in (None, "2026-05", "2026-06"):
        q = f"?month={month}" if month else ""
        d = web.get("/api/overview" + q).get_json()
        extra = ("--month", month) if month else ()
        assert pairs(d["tables"]["countries"]) == pairs(stats(test_env, "countries", "--limit", "1000", *extra))
        assert pairs(d["tables"]["torrents"]) == pairs(stats(test_env, "torrents", *extra))
        assert d["months"] == ["2026-06", "2026-05"]
    d = web.get("/api/overview").get_json()
    rows = {r["country"]: r for r in d["tables"]["countries"]}
    assert rows["Germany"]["count"] == 15 and rows["Germany"]["map_code"] == "DE"
    assert rows["Congo"]["map_code"] == "CD"  # the 2018 database's name of the DRC
    assert rows["Ivory Coast"]["map_code"] == "CI"
    assert rows["Singapore"]["map_code"] is None  # too small for the 1:110m map


def test_country_and_months_equal_stats(web, test_env):
    d = web.get("/api/country/United States").get_json()
    assert d["users"] == stats(test_env, "countries", "--country", "United States")[0]["count"] == 9
    assert pairs(d["tables"]["cities"]) == pairs(stats(test_env, "cities", "--country", "United States"))
    assert d["tables"]["cities"][0]["name"] == "St. Louis"  # as GeoIP spells it, as the stats table prints it
    assert pairs(d["tables"]["postcodes"]) == pairs(stats(test_env, "postcodes", "--country", "United States"))
    assert [(r["month"], r["count"]) for r in d["tables"]["months"]] == [("2026-05", 9), ("2026-06", 0)]
    d = web.get("/api/country/India").get_json()
    june = stats(test_env, "countries", "--country", "India", "--month", "2026-06")[0]["count"]
    assert [(r["month"], r["count"]) for r in d["tables"]["months"]] == [("2026-05", 8), ("2026-06", june)]
    assert june == 2 and d["users"] == 10
    d = web.get("/api/months?limit=3").get_json()
    assert d["countries"] == ["Germany", "India", "United States"]
    for r in d["tables"]["months"]:
        want = stats(test_env, "countries", "--country", r["country"], "--month", r["month"])
        assert r["count"] == (want[0]["count"] if want else 0)


def test_torrent_page_equals_torrent_and_stats(web, test_env):
    h = HASHES[0]
    d = web.get(f"/api/torrent/{h.upper()}").get_json()
    p = run(test_env, "torrent", h, "--json")
    info = json.loads(p.stdout)
    for k in ("state", "score", "visits", "seeders", "leechers", "peers_last_visit"):
        assert d["torrent"][k] == info[k]
    assert d["users"] == stats(test_env, "torrents", "--torrent", h)[0]["count"] == 49
    assert pairs(d["tables"]["countries"]) == pairs(stats(test_env, "countries", "--torrent", h, "--limit", "1000"))
    assert pairs(d["tables"]["cities"]) == pairs(stats(test_env, "cities", "--torrent", h))
    assert [(r["month"], r["count"]) for r in d["tables"]["months"]] == [
        (m, stats(test_env, "torrents", "--torrent", h, "--month", m)[0]["count"]) for m in ("2026-05", "2026-06")]
    assert [r["count"] for r in d["tables"]["months"]] == [39, 10]
    # its visits, as `torrent --json` keeps them, and as CSV
    assert len(info["history"]) == 1 and info["history"][0]["peers"] == info["peers_last_visit"]
    assert [(r["score"], r["peers"], r["seeders"], r["leechers"]) for r in d["tables"]["visits"]] == [
        (v["score"], v["peers"], v["seeders"], v["leechers"]) for v in info["history"]]
    assert d["tables"]["visits"][0]["at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info["history"][0]["at"]))
    rows = list(csv.DictReader(io.StringIO(web.get(f"/api/torrent/{h}?format=csv&table=visits").get_data(as_text=True))))
    assert [int(r["peers"]) for r in rows] == [v["peers"] for v in info["history"]]
    assert web.get("/api/torrent/" + "99" * 20).status_code == 404
    assert web.get("/api/torrent/xyz").status_code == 404


def test_operators_equal_status(web, test_env, settings):
    d = web.get("/api/operators").get_json()
    p = run(test_env, "status", "--json")
    status = json.loads(p.stdout)
    for k in ("tracked", "ready", "cooling", "in_flight", "evicted", "visits_last_hour", "failed_visits_last_hour"):
        assert d["status"][k] == status[k], k
    assert d["status"]["tracked"] == 4 and d["status"]["visits_last_hour"] == 4
    minutes = d["tables"]["minutes"]
    assert len(minutes) == 6 * 60
    assert sum(r["visits"] for r in minutes[-60:]) == status["visits_last_hour"]
    assert d["redis"][0]["used_memory_bytes"] > 0
    assert d["outbox"] == {"enabled": False, "stats_waiting": 0, "stats_in_flight": 0}


def test_csv_downloads_are_the_charted_numbers(web):
    r = web.get("/api/overview?format=csv&table=countries&month=2026-05")
    assert r.status_code == 200 and r.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(r.get_data(as_text=True))))
    j = web.get("/api/overview?month=2026-05").get_json()["tables"]["countries"]
    # the unplaced row last: no metric (empty in the CSV)
    assert [(x["metric"] or None, int(x["count"])) for x in rows] == pairs(j)
    assert rows[0]["metric"].endswith(".users.2026-05")
    r = web.get("/api/country/Germany?format=csv&table=postcodes")
    assert "countries.Germany.postcodes.80331.users" in r.get_data(as_text=True)
    assert web.get("/api/overview?format=csv&table=nope").status_code == 400
    assert web.get("/api/overview?month=2026-13").status_code == 400
    assert web.get("/api/overview?limit=0").status_code == 400


def test_pages_load_only_local_assets(web):
    for path in ("/", "/months", "/operators", "/country/Germany", f"/torrent/{HASHES[0]}"):
        r = web.get(path)
        assert r.status_code == 200, path
        html = r.get_data(as_text=True)
        assert "http://" not in html and "https://" not in html  # no CDN, ever
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    for asset in ("/static/vendor/echarts.min.js", "/static/world.json", "/static/dashboard.js"):
        assert web.get(asset).status_code == 200


def test_token_guards_every_request(client, keys, settings, world):
    token = "t0ken-for-the-dashboard"
    web = create_app(Views(client, keys, settings), token=token).test_client()
    assert web.get("/").status_code == 401
    assert web.get("/api/overview").status_code == 401
    assert web.get("/metrics").status_code == 401
    assert web.get("/?token=wrong-token-xxxxxxxx").status_code == 401
    r = web.get(f"/country/Germany?month=2026-05&token={token}")
    assert r.status_code == 303 and r.headers["Location"].endswith("/country/Germany?month=2026-05")
    assert "HttpOnly" in r.headers["Set-Cookie"]
    assert web.get("/api/overview").status_code == 200  # the cookie now carries it
    fresh = create_app(Views(client, keys, settings), token=token).test_client()
    assert fresh.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert fresh.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_metrics_parse_and_equal_status(web, test_env):
    for accept in ("text/plain", "application/openmetrics-text; version=1.0.0"):
        r = web.get("/metrics", headers={"Accept": accept})
        assert r.status_code == 200
        text = r.get_data(as_text=True)
        if "openmetrics" in accept:
            from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

            assert text.rstrip().endswith("# EOF")
            families = {f.name: f for f in om_parse(text)}
        else:
            families = {f.name: f for f in text_string_to_metric_families(text)}
        status = json.loads(run(test_env, "status", "--json").stdout)
        states = {s.labels["state"]: s.value for s in families["peercrawl_torrents"].samples}
        assert states == {k: status[k] for k in ("ready", "cooling", "in_flight", "quarantined", "evicted")}
        one = {name: families[name].samples[0].value for name in (
            "peercrawl_torrents_tracked", "peercrawl_visits_last_hour", "peercrawl_failed_visits_last_hour",
            "peercrawl_workers", "peercrawl_stathat_outbox_stats")}
        assert one == {"peercrawl_torrents_tracked": status["tracked"],
                       "peercrawl_visits_last_hour": status["visits_last_hour"],
                       "peercrawl_failed_visits_last_hour": status["failed_visits_last_hour"],
                       "peercrawl_workers": len(status["workers"]), "peercrawl_stathat_outbox_stats": 0}
        rates = status["rates"]
        if rates["claim_serve_rate"] is not None:
            assert families["peercrawl_claim_serve_ratio"].samples[0].value == rates["claim_serve_rate"]
        if rates["visit_round_trip_s"]["visits"]:
            rt = {s.labels["quantile"]: s.value for s in families["peercrawl_visit_round_trip_seconds"].samples}
            assert rt == {"0.5": rates["visit_round_trip_s"]["p50"], "0.95": rates["visit_round_trip_s"]["p95"]}
        # bounded labels only: nothing per torrent or per IP
        for f in families.values():
            for s in f.samples:
                assert set(s.labels) <= {"state", "url", "worker", "node", "message", "quantile", "kind"}, s


def test_metrics_trackers_and_workers(client, keys, settings, world, test_env):
    from crawler.sources.trackers.health import TrackerHealth
    from workers.heartbeat import Heartbeat

    health = TrackerHealth(client, keys, flush=0.0)
    health.record("udp://127.0.0.1:6969/announce", True)
    health.record("udp://127.0.0.1:6969/announce", True)
    health.record("http://127.0.0.1:1/announce", False)
    health.record("http://127.0.0.1:1/announce", False)
    health.flush()
    Heartbeat(client, keys, interval=30, worker_id="w1").beat(
        {"concurrency": 7, "visits": 3, "auto": True,
         "autoscale": {"t": 5.0, "size": 7, "was": 5, "why": "behind and visits grew", "busy": 5.0}})
    web = create_app(Views(client, keys, settings)).test_client()
    families = {f.name: f for f in text_string_to_metric_families(web.get("/metrics").get_data(as_text=True))}
    status = json.loads(run(test_env, "status", "--json").stdout)
    answers = {s.labels["url"]: s.value for s in families["peercrawl_tracker_answers"].samples
               if s.name.endswith("_total")}
    failures = {s.labels["url"]: s.value for s in families["peercrawl_tracker_failures"].samples
                if s.name.endswith("_total")}
    backing = {s.labels["url"]: s.value for s in families["peercrawl_tracker_backing_off"].samples}
    assert answers == {u: t["answers"] for u, t in status["trackers"].items()}
    assert failures == {u: t["failures"] for u, t in status["trackers"].items()}
    assert backing == {u: float(t["backing_off"]) for u, t in status["trackers"].items()}
    assert answers["udp://127.0.0.1:6969/announce"] == 2 and backing["http://127.0.0.1:1/announce"] == 1
    assert [(s.labels["worker"], s.value) for s in families["peercrawl_worker_concurrency"].samples] == [("w1", 7)]
    d = web.get("/api/operators").get_json()
    assert [(w["id"], w["concurrency"], w["autoscale"]) for w in d["tables"]["workers"]] == [
        ("w1", 7, "5 -> 7: behind and visits grew")]


def test_every_geolite_name_has_one_code_and_shapes_are_iso():
    seen = {}
    for code, names in NAMES.items():
        for n in names:
            assert seen.setdefault(n, code) == code, n
    assert len(shapes()) > 170
    assert shapes() <= set(NAMES)
    assert map_code("United States") == "US" and map_code("DR Congo") == "CD" and map_code("Congo Republic") == "CG"
    assert map_code("Atlantis") is None


def test_every_name_of_a_2024_geolite_database_finds_its_code():
    """The table knows the names of a current GeoLite2, not only the bundled 2018 one's."""
    path = Path(__file__).parent / "data" / "geolite2_country_names_20240618.json"
    current = json.loads(path.read_text(encoding="utf-8"))["names"]
    assert len(current) == 251
    assert {name: CODE_OF.get(name) for name in current.values()} == {name: code for code, name in current.items()}


def test_hostile_addresses_never_break_the_dashboard(client, keys, settings, world):
    """Any country name, month, limit, hash or token in the address: a clear 4xx or an answer, never a 500;
    a name lands in the page escaped."""
    from urllib.parse import quote

    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings
    from hypothesis import strategies as st

    web = create_app(Views(client, keys, settings)).test_client()
    guarded = create_app(Views(client, keys, settings), token="a-token-of-sixteen+").test_client()
    text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)

    @hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(name=text, month=text, limit=text, h=text, token=text)
    def check(name, month, limit, h, token):
        q = f"?month={quote(month)}&limit={quote(limit)}"
        for path in (f"/api/country/{quote(name, safe='')}{q}", f"/api/overview{q}", f"/api/torrent/{quote(h, safe='')}{q}",
                     f"/api/overview{q}&format=csv&table={quote(name)}", f"/country/{quote(name, safe='')}",
                     f"/torrent/{quote(h, safe='')}", f"/api/operators?hours={quote(limit)}"):
            r = web.get(path)
            assert r.status_code in (200, 301, 308, 400, 404, 405), (path, r.status_code)
        assert guarded.get(f"/api/overview?token={quote(token)}").status_code in (303, 401)

    check()
    r = web.get("/country/" + quote("<script>alert(1)</script>", safe=""))
    assert r.status_code == 200 and "<script>alert(1)</script>" not in r.get_data(as_text=True)


def test_dashboard_command_errors_are_one_line(test_env):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        p = run(test_env, "dashboard", "--port", str(s.getsockname()[1]), timeout=30)
    assert p.returncode == 1 and "cannot listen on 127.0.0.1" in p.stderr and "Traceback" not in p.stderr


def test_a_short_dashboard_token_is_named(test_env):
    p = run(dict(test_env, PEERCRAWL_DASHBOARD_TOKEN="short"), "dashboard", timeout=30)
    assert p.returncode == 2 and "PEERCRAWL_DASHBOARD_TOKEN" in p.stderr and "Traceback" not in p.stderr


def test_without_token_only_loopback_peers_naming_loopback_are_served(web):
    """The peer address (REMOTE_ADDR) decides; Host only narrows (tests/test_dashboard_door.py: real sockets)."""
    for host in ("127.0.0.1:8650", "localhost:8650", "[::1]:8650", "127.0.0.2:8650", "LOCALHOST"):
        assert web.get("/api/overview", headers={"Host": host}).status_code == 200, host
    r = web.get("/api/overview", headers={"Host": "rebound.example:8650"})
    assert r.status_code == 403 and b"PEERCRAWL_DASHBOARD_TOKEN" in r.data and r.mimetype == "text/plain"
    r = web.get("/api/overview", headers={"Host": "localhost"}, environ_base={"REMOTE_ADDR": "192.0.2.9"})
    assert r.status_code == 403 and b"PEERCRAWL_DASHBOARD_TOKEN" in r.data


def test_redis_gone_is_a_503_with_one_line(keys, settings):
    import socket

    import redis

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = redis.Redis(port=port, socket_connect_timeout=0.5, retry=None)  # fails at once, no backoff
    web = create_app(Views(gone, keys, settings)).test_client()
    for path in ("/api/overview", "/api/operators", f"/api/torrent/{HASHES[0]}", "/api/country/Germany"):
        r = web.get(path)
        assert r.status_code == 503, path
        assert "\n" not in r.get_json()["error"] and "Traceback" not in r.get_json()["error"]
    assert web.get("/metrics").status_code == 503
