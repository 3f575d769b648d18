"""Place names longer than a metric's name may hold: left out at the geo boundary, counted
with the GeoIP errors, and the visit still counts every IP for what is known of its place."""

from __future__ import annotations

import calendar

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import geo
from crawler.counters import Recorder, escape, metrics_for, top
from crawler.counters.geo_errors import geo_error_report
from crawler.counters.marks import Fingerprinter
from crawler.counters.places import PlaceInfo, lua_string
from crawler.keys import Keys
from geo.name_bound import MAX_NAME_BYTES, NameTooLong, escaped_bytes, fits
from tests.mmdb import write_city_db
from tests.opentracker import opentracker  # noqa: F401 (fixture)
from tests.recorder_one_visit import record_places

H = "ab" * 20
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
HUGE_CITY = "Ville-" + "x" * 69_994  # 70,000 bytes
STATHAT_MAX = 255  # StatHat's longest stat name, in characters

NETS = {
    "1.1.1.0/24": ("Germany", HUGE_CITY, "10115"),
    "1.1.2.0/24": ("Germany", "Berlin", "10117"),
    "2.2.2.0/24": ("C" * 200, "Paris", "75001"),  # a country over the bound: the whole place is unknown
    "3.3.3.0/24": ("Japan", "Kyoto", "6" * 100),  # a postcode over the bound
}


def counts(client, keys, family, **kw):
    return {r["metric"]: r["count"] for r in top(client, keys, family, limit=1000, **kw)}


@pytest.fixture
def db(tmp_path):
    return write_city_db(tmp_path / "long.mmdb", NETS)


def test_the_locator_leaves_out_names_over_the_bound_and_counts_each_read(db):
    loc = geo.open_locator(db, cache_size=0)
    assert loc.locate("1.1.1.1") == geo.Place("Germany", None, "10115")
    assert loc.locate("1.1.2.1") == geo.Place("Germany", "Berlin", "10117")
    assert loc.locate("2.2.2.2") == geo.Place()
    assert loc.locate("3.3.3.3") == geo.Place("Japan", "Kyoto", None)
    assert (loc.name_errors, loc.read_errors) == (3, 0)
    assert loc.last_name_error.startswith(f"name_too_long: {db}: a postcode name of 100 bytes")
    assert "6666" not in loc.last_name_error  # the name itself is not repeated
    cached = geo.open_locator(db)  # a cached place is answered again without a new count
    for _ in range(3):
        assert cached.locate("1.1.1.9").city is None
    assert cached.name_errors == 1


@pytest.mark.parametrize("shards", [1, 3])
def test_a_70000_byte_city_counts_the_peer_for_its_country_and_is_tallied(db, client, namespace, settings, shards):
    keys = Keys(namespace, shards)
    rec = Recorder(client, keys, settings, geo.open_locator(db))
    ips = ["1.1.1.1", "1.1.1.2", "1.1.2.1", "2.2.2.2", "3.3.3.3"]
    assert rec.record_visit(H, ips, T0) == 5  # the visit completes: every IP is new
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 5}
    assert counts(client, keys, "countries") == {"countries.Germany.users": 3, "countries.Japan.users": 1}
    # the long city is no city: its IPs count in no city, as an IP whose record has none
    assert counts(client, keys, "cities") == {"countries.Germany.cities.Berlin.users": 1,
                                              "countries.Japan.cities.Kyoto.users": 1}
    assert counts(client, keys, "postcodes", country="Germany") == {
        "countries.Germany.postcodes.10115.users": 2, "countries.Germany.postcodes.10117.users": 1}
    assert counts(client, keys, "postcodes", country="Japan") == {}
    report = geo_error_report(client, keys)
    # one per database network read: the long city's (two addresses in one network, read once),
    # the long country's, the long postcode's
    assert report["errors"] == 3 and report["kinds"] == {"name_too_long": 3}, report
    assert report["last"].startswith("name_too_long: ") and report["at"] == T0
    # a revisit finds nothing new; the cached places are not counted again
    assert rec.record_visit(H, ips, T0 + 60) == 0
    assert geo_error_report(client, keys)["errors"] == 3


def test_read_errors_and_long_names_are_told_apart(tmp_path, client, keys, settings):
    from tests.test_geo import damaged_networks, write_damaged_city_db

    nets, bad_ips, bad_codes = damaged_networks(6)
    nets["1.1.1.0/24"] = ("Germany", HUGE_CITY, "10115")
    db = write_damaged_city_db(tmp_path / "damaged.mmdb", nets, bad_codes)
    rec = Recorder(client, keys, settings, geo.open_locator(db))
    ips = [f"127.1.0.{i + 1}" for i in range(6)] + ["1.1.1.1"]
    assert rec.record_visit(H, ips, T0) == 7
    report = geo_error_report(client, keys)
    assert report["kinds"] == {"read_error": len(bad_ips), "name_too_long": 1}
    assert report["errors"] == len(bad_ips) + 1
    assert "InvalidDatabaseError" in report["last"]  # a damaged database is the one to show


def test_a_place_handed_in_with_a_long_name_is_recorded_without_it_and_counted(client, keys, settings, db):
    rec = Recorder(client, keys, settings, geo.open_locator(db))
    located = [(bytes([10, 0, 0, 1]), geo.Place("Germany", HUGE_CITY, "10115")),
               (bytes([10, 0, 0, 2]), geo.Place("X" * 70_000, "Berlin", None))]
    assert record_places(rec, H, located, T0) == 2
    assert counts(client, keys, "countries") == {"countries.Germany.users": 1}
    assert counts(client, keys, "cities") == {}
    report = geo_error_report(client, keys)
    assert report["kinds"] == {"name_too_long": 2}
    assert "city" in report["last"] or "country" in report["last"]


def test_stat_names_at_the_bound_fit_stathat(tmp_path, client, keys, settings):
    country, city, code = "C" * MAX_NAME_BYTES, "c." * (MAX_NAME_BYTES // 4), "9" * MAX_NAME_BYTES
    assert escaped_bytes(city) == MAX_NAME_BYTES
    db = write_city_db(tmp_path / "edge.mmdb", {"1.1.1.0/24": (country, city, code),
                                                "2.2.2.0/24": ("D" * MAX_NAME_BYTES, "y" * (MAX_NAME_BYTES + 1),
                                                               None)})
    s = settings.replace(stathat_ezkey="k", stathat_families=("countries", "torrents"))
    rec = Recorder(client, keys, s, geo.open_locator(db))
    assert rec.record_visit(H, ["1.1.1.1", "2.2.2.2"], T0) == 2
    stats = [k.decode() for k in client.hkeys(keys.outbox)]
    assert len(stats) == 9  # 1.1.1.1: every metric (7); 2.2.2.2: its country's two (its city is over)
    assert max(len(n) for n in stats) <= STATHAT_MAX
    assert f"torrents.{H}.countries.{country}.postcodes.{code}.users" in stats
    assert geo_error_report(client, keys)["kinds"] == {"name_too_long": 1}


# --- the bound, as a property ------------------------------------------------------

names = st.text(min_size=1, max_size=400).map(str.strip).filter(bool)
dotty = st.text(st.sampled_from("a.%é東\U0001f600"), min_size=1, max_size=120)


@given(st.one_of(names, dotty))
def test_fits_is_the_escaped_utf8_length(name):
    e = escape(name)
    assert escaped_bytes(name) == len(e.encode())
    assert fits(name) == (len(e.encode()) <= MAX_NAME_BYTES)


@given(st.one_of(names, dotty), st.one_of(names, dotty), st.one_of(names, dotty))
def test_every_metric_of_names_that_fit_is_a_stathat_name(country, city, postcode):
    for n in (country, city, postcode):
        if not fits(n):
            return
    for m in metrics_for(H, country, city, postcode):
        assert len(m.name) <= STATHAT_MAX


@hsettings(max_examples=50)
@given(st.tuples(st.one_of(st.none(), names, dotty, st.integers(89, 70_000).map(lambda n: "z" * n)),
                 st.one_of(st.none(), names, dotty, st.integers(89, 70_000).map(lambda n: "y" * n)),
                 st.one_of(st.none(), names, dotty, st.integers(89, 70_000).map(lambda n: "9" * n))))
def test_a_place_info_never_passes_a_name_over_the_bound_to_a_script(pkey):
    info = PlaceInfo(pkey, Fingerprinter(b"k" * 32, 64))
    assert info.country is None or len(info.country.encode()) <= MAX_NAME_BYTES
    assert len(info.tail) <= 2 * (2 + MAX_NAME_BYTES)
    parts = [("country", pkey[0]), ("city", pkey[1]), ("postcode", pkey[2])]
    over = [p for p, n in parts if n is not None and n.strip() and not fits(n.strip())]
    if pkey[0] is None or not pkey[0].strip():
        over = []  # no country: the rest is never read
    elif "country" in over:
        over = ["country"]  # nor after a country over the bound
    assert [e.part for e in info.dropped] == over


long_names = st.one_of(names, dotty, st.integers(MAX_NAME_BYTES - 2, 70_000).map(lambda n: "é." * (n // 4)))


@hsettings(max_examples=25, deadline=None)
@given(st.tuples(long_names, long_names, long_names))
def test_a_locator_place_holds_only_names_that_fit_and_counts_each_left_out(tmp_path_factory, parts):
    db = write_city_db(tmp_path_factory.mktemp("db") / "city.mmdb", {"1.1.1.0/24": parts})
    loc = geo.open_locator(db, cache_size=0)
    got = loc.locate("1.1.1.1")
    country, city, postcode = (p.strip() or None for p in parts)
    if country is not None and not fits(country):
        assert got == geo.Place() and loc.name_errors == 1
        return
    want = [n if n is None or fits(n) else None for n in (country, city, postcode)]
    assert got == geo.Place(*want)
    assert loc.name_errors == sum(n is not None and not fits(n) for n in (city, postcode))


def test_lua_string_refuses_a_name_over_the_bound():
    assert lua_string("a" * MAX_NAME_BYTES) == MAX_NAME_BYTES.to_bytes(2, "big") + b"a" * MAX_NAME_BYTES
    with pytest.raises(NameTooLong, match="over the 88-byte bound"):
        lua_string("a" * 70_000)


# --- a real visit ------------------------------------------------------------------


def test_a_worker_visit_with_a_70000_byte_city_completes_and_status_names_the_error(
        test_env, opentracker, tmp_path):  # noqa: F811 (fixture)
    from tests.test_worker_e2e import ROOT, announce, counter, h, pc, pcj

    env = dict(test_env, PYTHONPATH=ROOT)
    env["GEOIP_DB"] = str(write_city_db(tmp_path / "long.mmdb", {
        "127.1.0.0/25": ("Germany", HUGE_CITY, "10115"),
        "127.1.0.128/25": ("Germany", "Berlin", "10117"),
    }))
    ih = h("long-city")
    ot = opentracker([ih])
    announce(ot, ih, 4, 0)  # 127.1.0.1-4: the long city
    announce(ot, ih, 2, 130)  # 127.1.0.131-132: Berlin
    env.update(PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_LEASE_SECONDS="5")
    pcj(env, "add", ih)
    pc(env, "worker", "--until-idle", "--concurrency", "2", timeout=60)
    t = pcj(env, "torrent", ih)
    assert t["state"] == "cooling" and t["visits"] == 1 and t["peers_last_visit"] == 6, t
    assert counter(env, "torrents") == {f"torrents.{ih}.users": 6}
    assert counter(env, "countries") == {"countries.Germany.users": 6}
    # the four whose city name was too long are in no city: the unplaced row (None) says so
    assert counter(env, "cities") == {"countries.Germany.cities.Berlin.users": 2, None: 4}
    assert counter(env, "postcodes") == {"countries.Germany.postcodes.10115.users": 4,
                                         "countries.Germany.postcodes.10117.users": 2}
    geo_errors = pcj(env, "status")["geo_errors"]
    # tallied once per database network read: the four addresses share one
    assert geo_errors["kinds"] == {"name_too_long": 1} and geo_errors["errors"] == 1, geo_errors
    assert "a city name of 70,000 bytes" in geo_errors["last"]
