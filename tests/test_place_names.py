"""Place names and figures as a person reads them: ``stats`` and the dashboard, on the real Redis.

Visits are recorded by the real ``Recorder`` over the test City database
(``tests/mmdb.py``: ``St. Louis`` holds a dot, 9.9.9.9 and 10.1.2.3 are
places the database does not know, Iceland a country without cities); the
commands run in subprocesses (``tests/cli.py``) and the dashboard's pages
through its Flask app, as ``tests/test_dashboard.py`` fetches them.
"""

from __future__ import annotations

import calendar
import csv
import io
import json

import pytest
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import geo
from crawler.counters import Recorder, metrics_for, top
from crawler.counters.country_names import match
from crawler.counters.names import read_metric, readable
from crawler.counters.rankings import unplaced
from crawler.dashboard.app import create_app
from crawler.dashboard.views import Views
from crawler.keys import Keys
from tests.cli import run
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace

H = "ab" * 20
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
JUNE = T0 + 40 * 86400  # past the 30-day window: May's marks have expired
# Germany 3 (München 2, Berlin 1), United States 1 (St. Louis), Côte d'Ivoire 1 (a city, no postcode),
# Iceland 1 (no city, no postcode), Japan 1, and two addresses the database cannot place.
MAY_IPS = ["1.1.1.1", "1.1.1.2", "1.1.2.1", "2.2.2.2", "3.3.3.3", "4.4.4.4", "5.5.5.5", "9.9.9.9", "10.1.2.3"]
JUNE_IPS = ["1.1.1.1", "9.9.9.9"]


def record(client, keys, settings, tmp_path) -> None:
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "city.mmdb")))
    rec.record_visit(H, MAY_IPS, T0)
    rec.record_visit(H, JUNE_IPS, JUNE)


@pytest.fixture
def recorded(client, keys, settings, tmp_path):
    record(client, keys, settings, tmp_path)


def stats(env, *args) -> list[dict]:
    p = run(env, "stats", *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def table(env, *args) -> list[str]:
    p = run(env, "stats", *args)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p.stdout.splitlines()


def test_stats_prints_st_louis_as_geoip_spells_it_and_keeps_the_stat_name_exact(recorded, test_env):
    lines = table(test_env, "cities")
    assert "1  countries.United States.cities.St. Louis.users" in lines
    assert not any("%2E" in line for line in lines), lines
    # JSON: the metric is the exact stat name; the names beside it are unescaped, as export's columns
    (row,) = stats(test_env, "cities", "--country", "United States")
    assert row == {"metric": "countries.United States.cities.St%2E Louis.users", "count": 1,
                   "country": "United States", "city": "St. Louis"}
    rows = stats(test_env, "postcodes", "--torrent", H, "--country", "United States")
    assert rows == [{"metric": f"torrents.{H}.countries.United States.postcodes.63101.users", "count": 1,
                     "country": "United States", "postcode": "63101"}]
    p = run(test_env, "stats", "cities", "--torrent", H, "--format", "csv")
    got = list(csv.DictReader(io.StringIO(p.stdout)))
    louis = [r for r in got if r["metric"] == f"torrents.{H}.countries.United States.cities.St%2E Louis.users"]
    assert louis == [{"metric": louis[0]["metric"], "count": "1", "country": "United States", "city": "St. Louis"}]


@pytest.mark.parametrize("typed", ["germany", "GERMANY", "DE", "de", " de "])
def test_a_country_is_found_in_any_case_and_by_its_iso_code(recorded, test_env, typed):
    assert stats(test_env, "countries", "--country", typed) == [
        {"metric": "countries.Germany.users", "count": 4, "country": "Germany"}]  # 1.1.1.1 again in June
    assert "3  countries.Germany.cities.München.users" in table(test_env, "cities", "--country", typed)


def test_every_query_of_one_country_takes_its_code(recorded, test_env):
    assert [(r["metric"], r["count"]) for r in stats(test_env, "cities", "--country", "de")] == [
        ("countries.Germany.cities.München.users", 3), ("countries.Germany.cities.Berlin.users", 1)]
    assert [r["city"] for r in stats(test_env, "cities", "--torrent", H, "--country", "de")] == ["München", "Berlin"]
    assert [r["metric"] for r in stats(test_env, "torrents", "--country", "de")] == [
        f"torrents.{H}.countries.Germany.users"]


def test_a_country_nobody_was_counted_in_still_answers_nothing(recorded, test_env):
    for typed in ("fr", "France", "Atlantis"):
        assert stats(test_env, "cities", "--country", typed) == []
        assert table(test_env, "countries", "--country", typed) == ["no counters yet"]
    p = run(test_env, "stats", "cities", "--country", " ")
    assert p.returncode == 2 and "must not be empty" in p.stderr and "Traceback" not in p.stderr


def test_matching_prefers_the_counted_spelling():
    known = {"Czechia": 3.0, "Czech Republic": 9.0, "Germany": 1.0}
    assert match("cz", known) == "Czech Republic"  # both spellings counted (a database update): the larger
    assert match("CZ", {"Czechia": 3.0}) == "Czechia"
    assert match("czechia", known) == "Czechia"
    assert match("germany", {}) == "Germany"  # nobody counted yet: GeoLite2's spelling
    assert match("xx", known) is None and match("Atlantis", known) is None


# Names as GeoIP may hold them: any text, dots, percent signs, controls, surrogate-free Unicode.
NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30) | st.sampled_from(
    ["St. Louis", "%2E", "%25", "100%", "a.b%2Ec", ".", "%"])


@hsettings(max_examples=300, deadline=None)
@given(country=NAMES, city=NAMES, postcode=NAMES, month=st.sampled_from([None, "2024-05"]))
@example(country="postcodes", city="", postcode="", month=None)  # a name that reads as a family's
@example(country="cities", city="postcodes", postcode="cities", month="2024-05")
def test_every_metric_name_reads_back_as_the_names_it_was_built_from(country, city, postcode, month):
    """``read_metric`` (what the table, --json, the CSV and the dashboard show) returns each name
    exactly as GeoIP gave it (trimmed), whatever it holds; ``readable`` and ``match`` never fail."""
    for i, m in enumerate(metrics_for(H, country, city, postcode)):
        name = m.name + ("" if month is None else "." + month)
        got = read_metric(name)
        assert got["info_hash"] == H if name.startswith("torrents.") else "info_hash" not in got
        assert got.get("month") == month
        # what the metric holds, from how it was built (a name's text may read as a family's:
        # a country called "postcodes")
        families = {scope[0] for scope, _ in m.indexes}
        if i > 0:  # every metric but torrents.<h>.users has the country
            assert got["country"] == country.strip()
        for part, family in (("city", "cities"), ("postcode", "postcodes")):
            value = city if part == "city" else postcode
            if family in families:
                assert got[part] == value.strip()
            else:
                assert part not in got
        assert readable(name).startswith(("torrents.", "countries."))
    match(country, {city: 1.0})


def test_unplaced_peers_have_their_row_in_a_torrents_countries_cities_and_postcodes(recorded, test_env):
    users = stats(test_env, "torrents", "--torrent", H)[0]["count"]
    # May's nine and June's two again; the unplaced (9.9.9.9 twice, 10.1.2.3) count for the torrent (contract §4)
    assert users == 11
    countries = stats(test_env, "countries", "--torrent", H, "--limit", "1000")
    assert countries[-1] == {"metric": None, "count": 3, "unplaced": True}
    assert sum(r["count"] for r in countries) == users
    assert table(test_env, "countries", "--torrent", H)[-1] == "3  unplaced (no country known)"
    # no city: those three and Iceland's peer; no postcode: those four and Côte d'Ivoire's
    assert stats(test_env, "cities", "--torrent", H)[-1] == {"metric": None, "count": 4, "unplaced": True}
    assert stats(test_env, "postcodes", "--torrent", H)[-1] == {"metric": None, "count": 5, "unplaced": True}
    assert stats(test_env, "cities", "--torrent", H, "--country", "is") == [
        {"metric": None, "count": 1, "unplaced": True, "country": "Iceland"}]
    assert table(test_env, "cities", "--torrent", H, "--country", "Iceland") == ["1  unplaced (no city known)"]
    # a month's: June counted 1.1.1.1 and 9.9.9.9 again
    assert [(r["metric"], r["count"]) for r in stats(test_env, "countries", "--torrent", H, "--month", "2024-06")] == [
        (f"torrents.{H}.countries.Germany.users.2024-06", 1), (None, 1)]
    p = run(test_env, "stats", "countries", "--torrent", H, "--format", "csv")
    assert list(csv.reader(io.StringIO(p.stdout)))[-1] == ["", "3", "unplaced"]


def test_a_countrys_peers_without_a_city_have_their_row(recorded, test_env):
    assert stats(test_env, "cities", "--country", "Iceland") == [
        {"metric": None, "count": 1, "unplaced": True, "country": "Iceland"}]
    ivory = stats(test_env, "postcodes", "--country", "Côte d'Ivoire")
    assert ivory == [{"metric": None, "count": 1, "unplaced": True, "country": "Côte d'Ivoire"}]
    # every German peer is in a city: no row
    assert all(r["metric"] for r in stats(test_env, "cities", "--country", "Germany"))
    # lists over every country end with theirs too (one torrent here: the same as its own)
    for fam, n in (("countries", 3), ("cities", 4), ("postcodes", 5)):
        rows = stats(test_env, fam)
        assert all(r["metric"] for r in rows[:-1]) and rows[-1] == {"metric": None, "count": n, "unplaced": True}
    assert stats(test_env, "countries", "--month", "2024-06")[-1] == {"metric": None, "count": 1, "unplaced": True}
    assert table(test_env, "countries")[-1] == "3  unplaced (no country known)"


def test_the_dashboard_shows_names_decoded_countries_as_typed_and_unplaced_rows(client, keys, settings, recorded):
    web = create_app(Views(client, keys, settings)).test_client()
    d = web.get(f"/api/torrent/{H}").get_json()
    cities = d["tables"]["cities"]
    louis = [r for r in cities if r["metric"] == f"torrents.{H}.countries.United States.cities.St%2E Louis.users"]
    assert [(r["name"], r["country"]) for r in louis] == [("St. Louis", "United States")]
    assert cities[-1] == {"metric": None, "count": 4, "name": "unplaced", "country": None, "unplaced": True}
    countries = d["tables"]["countries"]
    assert countries[-1]["unplaced"] and countries[-1]["count"] == 3 and countries[-1]["name"] == "unplaced"
    assert sum(r["count"] for r in countries) == d["users"] == 11
    shown = web.get(f"/api/torrent/{H}?format=csv&table=cities").get_data(as_text=True)
    assert "St. Louis" in shown and "%2E" not in shown.replace("St%2E Louis.users", "")
    assert list(csv.reader(io.StringIO(shown)))[-1] == ["", "4", "unplaced", ""]
    for typed in ("germany", "DE", "de"):
        d = web.get(f"/api/country/{typed}").get_json()
        assert d["country"] == "Germany" and d["users"] == 4 and d["map_code"] == "DE"
        assert [r["name"] for r in d["tables"]["cities"]] == ["München", "Berlin"]
    d = web.get("/api/country/us").get_json()
    assert d["country"] == "United States" and [r["name"] for r in d["tables"]["cities"]] == ["St. Louis"]
    d = web.get("/api/country/iceland").get_json()
    assert d["tables"]["cities"] == [{"metric": None, "count": 1, "name": "unplaced", "country": "Iceland",
                                      "unplaced": True}]
    page = web.get("/country/de").get_data(as_text=True)
    assert '<span id="country-name">de</span>' in page  # the script writes the counters' name into it
    # the map's countries end with the peers no country holds, on no map; the map's total leaves them out
    d = web.get("/api/overview").get_json()
    countries = d["tables"]["countries"]
    assert countries[-1] == {"metric": None, "count": 3, "name": "unplaced", "country": None, "unplaced": True,
                             "map_code": None}
    assert d["total_users_in_countries"] == sum(r["count"] for r in countries[:-1]) == 8
    assert "%unplaced" not in web.get("/api/overview?format=csv&table=countries").get_data(as_text=True)


def test_unplaced_is_the_same_on_three_shards(client, namespace, settings, tmp_path):
    got = {}
    for shards in (1, 3):
        ns = f"{namespace}-x{shards}"
        keys = Keys(ns, shards)
        try:
            record(client, keys, settings.replace(namespace=ns), tmp_path)
            got[shards] = [
                unplaced(client, keys, fam, torrent=t, country=c, month=m)
                for fam in ("countries", "cities", "postcodes")
                for t in (None, H) for c in (None, "Iceland", "Germany") for m in (None, "2024-06")]
            assert top(client, keys, "torrents", torrent=H)[0]["count"] == 11
        finally:
            delete_namespace(client, ns)
    assert got[3] == got[1] and 4 in got[1] and 5 in got[1] and None in got[1]


def test_a_countrys_sum_read_in_slices_is_the_whole_sum(client, keys, recorded, monkeypatch):
    """The sum over a country's index is pipelined in slices (``index_sum.lua``): one member a slice
    gives what one slice of all does."""
    from crawler.counters import rankings

    scopes = [(fam, c, m) for fam in ("cities", "postcodes") for c in ("Germany", "United States", "Iceland")
              for m in (None, "2024-05", "2024-06")]
    whole = [unplaced(client, keys, fam, country=c, month=m) for fam, c, m in scopes]
    monkeypatch.setattr(rankings, "SUM_SLICE", 1)
    assert [unplaced(client, keys, fam, country=c, month=m) for fam, c, m in scopes] == whole
    assert whole[:3] == [0, 0, 0] and whole[6] == 1  # Germany's peers all have a city; Iceland's one none
