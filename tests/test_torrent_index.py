"""One torrent's index: its countries, cities and postcodes in one hash a period, and the hashes of
their own an earlier crawl kept, read with it."""

from __future__ import annotations

import calendar
import csv

import pytest

import geo
from crawler.counters import Recorder, count, metrics_for, month_of, top
from crawler.counters.csv_export import export
from crawler.counters.rankings import unplaced
from tests.mmdb import write_city_db

H = "ab" * 20
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
MONTH = month_of(T0)
# tests/mmdb.py's SAMPLE: München (80331) twice, Berlin (10115), St. Louis (63101), Iceland without a city
IPS = ["1.1.1.1", "1.1.1.2", "1.1.2.1", "2.2.2.2", "4.4.4.4"]


@pytest.fixture
def recorder(client, keys, settings, tmp_path):
    return Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "city.mmdb")))


def ranked(client, keys, family, limit=1000, **kw):
    return {r["metric"]: r["count"] for r in top(client, keys, family, torrent=H, limit=limit, **kw)}


def test_a_torrents_three_families_are_one_hash_a_period(recorder, client, keys):
    assert recorder.record_visit(H, IPS, T0) == 5
    for period in ("all", MONTH):
        whole = {m.decode(): int(n) for m, n in client.hgetall(keys.index(period, ("countries", "t", H))).items()}
        assert whole == {"Germany": 3, "United States": 1, "Iceland": 1,
                         "%cGermany.München": 2, "%cGermany.Berlin": 1, "%cUnited States.St%2E Louis": 1,
                         "%pGermany.80331": 2, "%pGermany.10115": 1, "%pUnited States.63101": 1}
        for family in ("cities", "postcodes"):  # no key of their own any more
            assert not client.exists(keys.index(period, (family, "t", H)))
    assert ranked(client, keys, "countries") == {f"torrents.{H}.countries.Germany.users": 3,
                                                 f"torrents.{H}.countries.United States.users": 1,
                                                 f"torrents.{H}.countries.Iceland.users": 1}
    assert ranked(client, keys, "cities", country="Germany") == {
        f"torrents.{H}.countries.Germany.cities.München.users": 2,
        f"torrents.{H}.countries.Germany.cities.Berlin.users": 1}
    assert ranked(client, keys, "postcodes", month=MONTH) == {
        f"torrents.{H}.countries.Germany.postcodes.80331.users.{MONTH}": 2,
        f"torrents.{H}.countries.Germany.postcodes.10115.users.{MONTH}": 1,
        f"torrents.{H}.countries.United States.postcodes.63101.users.{MONTH}": 1}
    # the peers without a city: Iceland's
    assert unplaced(client, keys, "cities", torrent=H) == 1
    (berlin,) = [m for m in metrics_for(H, "Germany", "Berlin", "10115") if ".cities." in m.name and m.name.startswith("t")]
    assert count(client, keys, berlin) == 1


def test_an_earlier_crawls_own_hashes_of_cities_and_postcodes_still_count(recorder, client, keys, tmp_path):
    # A crawl recorded before the one hash kept a torrent's cities and postcodes in hashes of their
    # own; nothing writes them now, every read adds them.
    for period in ("all", MONTH):
        client.hset(keys.index(period, ("cities", "t", H)), mapping={"Germany.Berlin": 5, "France.Paris": 2})
        client.hset(keys.index(period, ("postcodes", "t", H)), mapping={"Germany.10115": 4})
    assert recorder.record_visit(H, IPS, T0) == 5
    assert client.hgetall(keys.index("all", ("cities", "t", H))) == {b"Germany.Berlin": b"5", b"France.Paris": b"2"}
    cities = {f"torrents.{H}.countries.Germany.cities.Berlin.users": 6,
              f"torrents.{H}.countries.France.cities.Paris.users": 2,
              f"torrents.{H}.countries.Germany.cities.München.users": 2,
              f"torrents.{H}.countries.United States.cities.St%2E Louis.users": 1}
    assert ranked(client, keys, "cities") == cities
    assert list(ranked(client, keys, "cities", limit=1)) == [f"torrents.{H}.countries.Germany.cities.Berlin.users"]
    assert ranked(client, keys, "cities", country="France") == {f"torrents.{H}.countries.France.cities.Paris.users": 2}
    assert ranked(client, keys, "postcodes", month=MONTH)[
        f"torrents.{H}.countries.Germany.postcodes.10115.users.{MONTH}"] == 5
    (berlin,) = [m for m in metrics_for(H, "Germany", "Berlin", "10115") if ".cities." in m.name and m.name.startswith("t")]
    assert count(client, keys, berlin) == 6 and count(client, keys, berlin, month=MONTH) == 6
    # the export writes the sums, one row a member
    rows = export(client, keys, tmp_path / "out", now=T0)
    assert rows["torrent_cities"] == 2 * 4 and rows["torrent_postcodes"] == 2 * 3
    with open(tmp_path / "out" / "torrent_cities.csv", encoding="utf-8") as f:
        got = {(r[0], r[1]): r[-1] for r in csv.reader(f)}
    assert got[(f"torrents.{H}.countries.Germany.cities.Berlin.users", "all")] == "6"
    assert got[(f"torrents.{H}.countries.France.cities.Paris.users.{MONTH}", MONTH)] == "2"
