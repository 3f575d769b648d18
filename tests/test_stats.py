"""``peercrawl stats`` and ``peercrawl flush`` run as commands, on the real Redis."""

from __future__ import annotations

import calendar
import json
import subprocess
import sys

import pytest

import geo
from crawler.counters import Recorder
from tests.mmdb import write_city_db
from tests.stathat_sink import StatHatSink

H = "ab" * 20
# A torrent the counters know and the queue never visited: no coverage figures.
NO_VISIT = {"counts_estimated": False, "reported_last_visit": None, "counted_last_visit": None, "counted_30_days": 0,
            "coverage": None}
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))


def peercrawl(env, *args):
    return subprocess.run([sys.executable, "-c", "from crawler.cli import main; main()", *args],
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def recorded(client, keys, settings, tmp_path):
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "city.mmdb")))
    rec.record_visit(H, ["1.1.1.1", "1.1.1.2", "1.1.2.1", "2.2.2.2", "4.4.4.4", "9.9.9.9"], T0)
    rec.record_visit("cd" * 20, ["1.1.1.1"], T0 + 40 * 86400)  # June
    return rec


def test_stats_json_largest_first(recorded, test_env):
    r = peercrawl(test_env, "stats", "countries", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"metric": "countries.Germany.users", "count": 4, "country": "Germany"},  # 1.1.1.1 again after 30 days
        {"metric": "countries.Iceland.users", "count": 1, "country": "Iceland"},
        {"metric": "countries.United States.users", "count": 1, "country": "United States"},
        {"metric": None, "count": 1, "unplaced": True},  # 9.9.9.9, which the database cannot place
    ]
    r = peercrawl(test_env, "stats", "cities", "--country", "United States", "--json")
    assert json.loads(r.stdout) == [{"metric": "countries.United States.cities.St%2E Louis.users", "count": 1,
                                     "country": "United States", "city": "St. Louis"}]
    r = peercrawl(test_env, "stats", "torrents", "--limit", "1", "--json")
    assert json.loads(r.stdout) == [{"metric": f"torrents.{H}.users", "count": 6, "name": None, **NO_VISIT}]
    r = peercrawl(test_env, "stats", "torrents", "--month", "2024-06", "--json")
    assert json.loads(r.stdout) == [{"metric": f"torrents.{'cd' * 20}.users.2024-06", "count": 1, "name": None,
                                     **NO_VISIT}]
    r = peercrawl(test_env, "stats", "postcodes", "--torrent", H.upper(), "--country", "Germany", "--json")
    assert json.loads(r.stdout) == [
        {"metric": f"torrents.{H}.countries.Germany.postcodes.80331.users", "count": 2, "country": "Germany",
         "postcode": "80331"},
        {"metric": f"torrents.{H}.countries.Germany.postcodes.10115.users", "count": 1, "country": "Germany",
         "postcode": "10115"},
    ]


def test_stats_text_and_bad_arguments(recorded, test_env):
    r = peercrawl(test_env, "stats", "cities")
    assert r.returncode == 0 and "3  countries.Germany.cities.München.users" in r.stdout
    r = peercrawl(test_env, "stats", "cities", "--month", "2024-13")
    assert r.returncode != 0 and "YYYY-MM" in r.stderr
    r = peercrawl(test_env, "stats", "countries", "--torrent", "xyz")
    assert r.returncode != 0 and "info-hash" in r.stderr
    r = peercrawl(test_env, "stats", "planets")
    assert r.returncode != 0


def test_flush_command_posts_once(client, keys, settings, test_env, tmp_path):
    with StatHatSink() as sink:
        s = settings.replace(stathat_ezkey="cli-key", stathat_url=sink.url)
        rec = Recorder(client, keys, s, geo.open_locator(write_city_db(tmp_path / "city.mmdb")))
        rec.record_visit(H, ["1.1.1.1", "2.2.2.2"], T0)
        env = dict(test_env, STATHAT_EZKEY="cli-key", STATHAT_URL=sink.url)
        r = peercrawl(env, "flush", "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["ok"] and out["increments"] == 6 and out["requests"] == 1
        assert sink.counts()["countries.Germany.users"] == 1
        sink.fail_next(1)
        rec.record_visit(H, ["1.1.2.2"], T0)
        r = peercrawl(env, "flush")
        assert r.returncode == 1 and "post failed" in r.stderr
        r = peercrawl(env, "flush")
        assert r.returncode == 0 and "posted 3 increments" in r.stdout
        assert sink.counts()["countries.Germany.users"] == 2
    r = peercrawl(test_env, "flush")
    assert r.returncode == 0 and "STATHAT_EZKEY is unset" in r.stdout
