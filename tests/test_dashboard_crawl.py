"""A real crawl of the loopback world seen through the dashboard in headless chromium.

``peercrawl run`` crawls two magnet links whose peers announce to a real
opentracker from 127.1.x.y addresses that a test City database places in
Germany, Japan and the United States; run serves the dashboard, and chromium
must show on it the numbers ``stats --json`` prints for that crawl.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request

import pytest

from tests.cli import run, start_run
from tests.dashboard_data import stats_json
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.test_dashboard_browser import browser, dom_counts, figure, painted_colours, shot, wait_rendered  # noqa: F401

pytestmark = pytest.mark.slow

PLACES = {
    "127.1.0.0/24": ("Germany", "Berlin", "10115"),
    "127.1.1.0/24": ("Japan", "Osaka", "530-0001"),
    "127.1.2.0/24": ("United States", "St. Louis", "63101"),
}


def stats(env, *args) -> list[tuple]:
    return stats_json(env, *args)


def test_a_crawl_shows_on_the_dashboard(test_env, opentracker, browser, tmp_path):  # noqa: F811 (fixtures)
    a, b = hashlib.sha1(b"crawl-a").hexdigest(), hashlib.sha1(b"crawl-b").hexdigest()
    ot = opentracker([a, b])
    for i in range(12):  # 127.1.0.1-12: Germany
        ot.announce_from(peer_address(i), a, 6881)
    for i in (250, 251, 252, 500, 501):  # 127.1.1.1-3 Japan, 127.1.2.1-2 United States
        ot.announce_from(peer_address(i), a if i < 500 else b, 6881)
    for i in range(3):
        ot.announce_from(peer_address(i), b, 6881)
    env = dict(test_env, GEOIP_DB=str(write_city_db(tmp_path / "city.mmdb", PLACES)))
    magnets = [f"magnet:?xt=urn:btih:{h}&tr={ot.udp_url}" for h in (a, b)]
    p, base = start_run(env, *magnets, "--duration", "60")
    try:
        end = time.monotonic() + 30
        status: dict = {}
        while time.monotonic() < end:
            with urllib.request.urlopen(base + "/api/operators", timeout=5) as r:
                status = json.load(r)["status"]
            if status["visits_last_hour"] >= 2:
                break
            time.sleep(0.3)
        assert status["visits_last_hour"] == 2 and status["cooling"] == 2

        d = browser
        d.get(base + "/")
        wait_rendered(d)
        time.sleep(0.5)
        want = stats(env, "countries")
        assert want == [("countries.Germany.users", 12), ("countries.Japan.users", 3),
                        ("countries.United States.users", 2)]
        assert dom_counts(d, "countries") == want
        assert dom_counts(d, "torrents") == stats(env, "torrents") == [(f"torrents.{a}.users", 15),
                                                                     (f"torrents.{b}.users", 5)]
        assert painted_colours(d, "map") > 5
        shot(d, tmp_path, "crawl-map")

        d.get(base + "/country/United%20States")
        wait_rendered(d)
        assert dom_counts(d, "cities") == stats(env, "cities", "--country", "United States") == [
            ("countries.United States.cities.St%2E Louis.users", 2)]

        d.get(f"{base}/torrent/{b}")
        wait_rendered(d)
        time.sleep(0.5)
        assert dom_counts(d, "countries") == stats(env, "countries", "--torrent", b)
        info = json.loads(run(env, "torrent", b, "--json").stdout)
        assert figure(d, "peers_last_visit") == str(info["peers_last_visit"]) == "5"
        shot(d, tmp_path, "crawl-torrent")
    finally:
        p.terminate()
        p.wait(30)
