"""geo.Locator on a small City database written by the test, and on the bundled GeoLite2."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import geo
from crawler.counters.ip_forms import canonical_ip
from crawler.errors import GeoError
from tests.mmdb import UNMAPPED, write_city_db, write_country_db


@pytest.fixture
def db(tmp_path):
    return write_city_db(tmp_path / "city.mmdb")


def test_names_in_english_with_non_ascii_letters_and_dots(db):
    loc = geo.open_locator(db)
    assert loc.locate("1.1.1.7") == geo.Place("Germany", "München", "80331")
    assert loc.locate("2.2.2.200") == geo.Place("United States", "St. Louis", "63101")
    assert loc.locate("5.5.5.5") == geo.Place("Japan", "東京", "100-0001")
    assert loc.locate("3.3.3.3") == geo.Place("Côte d'Ivoire", "Yamoussoukro", None)


def test_country_without_city_or_postcode(db):
    p = geo.open_locator(db).locate("4.4.4.4")
    assert p == geo.Place("Iceland", None, None)
    assert not p.empty


@pytest.mark.parametrize("ip", UNMAPPED)
def test_unmapped_addresses_give_an_empty_place(db, ip):
    p = geo.open_locator(db).locate(ip)
    assert p.empty and p == geo.Place()


def test_ipv6_and_ipv4_mapped(db):
    loc = geo.open_locator(db)
    assert loc.locate("2001:db8:2::99") == geo.Place("Brasil", "São Paulo", "01000-000")
    assert loc.locate("::ffff:1.1.2.3") == geo.Place("Germany", "Berlin", "10115")
    for ip in ("2001:db8:2::99", "::ffff:1.1.2.3", "1.1.2.3"):
        assert loc.locate_parsed(*canonical_ip(ip)) == loc.locate(ip), ip
        assert loc.locate_packed(canonical_ip(ip)[0]) == loc.locate(ip), ip


def test_not_an_ip_raises_value_error(db):
    with pytest.raises(ValueError):
        geo.open_locator(db).locate("not-an-ip")


def test_lru_cache_answers_repeats(db):
    loc = geo.open_locator(db, cache_size=2)
    for ip in ("1.1.1.1", "1.1.1.1", "1.1.1.1", "2.2.2.2", "5.5.5.5", "1.1.1.1"):
        loc.locate(ip)
    info = loc.cache_info()
    assert info.hits == 2 and info.misses == 4 and info.currsize == 2


def test_locator_from_settings_uses_geoip_db(db, settings):
    loc = geo.Locator(settings.replace(geoip_db=db, geo_cache_size=0))
    assert not loc.bundled and loc.path == db
    assert loc.cache_info() is None
    assert loc.locate("1.1.1.1").country == "Germany"


def test_missing_geoip_db_fails_at_start_with_a_clear_message(tmp_path):
    with pytest.raises(GeoError, match=r"GEOIP_DB: .*nope\.mmdb does not exist.*GeoLite2\.mmdb\.README"):
        geo.open_locator(tmp_path / "nope.mmdb")


def test_unreadable_geoip_db_fails_at_start(tmp_path):
    bad = tmp_path / "bad.mmdb"
    bad.write_bytes(b"this is not a MaxMind database" * 10)
    with pytest.raises(GeoError, match="GEOIP_DB: cannot read"):
        geo.open_locator(bad)


def test_a_country_database_is_refused(tmp_path):
    with pytest.raises(GeoError, match="City database is needed"):
        geo.open_locator(write_country_db(tmp_path / "country.mmdb"))


def test_bundled_geolite2_warns_about_its_age_and_places_real_addresses():
    with capture_logs() as logs:
        loc = geo.open_locator(None)
    assert loc.bundled and loc.path == geo.bundled_database_path() and loc.path.name == "GeoLite2-City.mmdb"
    warning = [e for e in logs if e["event"] == "geoip_bundled_database"]
    assert warning and "2018" in warning[0]["message"] and warning[0]["log_level"] == "warning"
    assert loc.locate("81.2.69.142") == geo.Place("United Kingdom", "Willesden", "NW10")
    assert loc.locate("89.160.20.128") == geo.Place("Sweden", "Stockholm", "173 11")
    assert loc.locate("2001:4860:4860::8888") == geo.Place("United States", "Mountain View", "94043")
    assert loc.locate("8.8.8.8") == geo.Place("United States", None, None)
    assert loc.locate("192.168.1.1").empty


def write_damaged_city_db(path, networks: dict, damaged_postcodes) -> Path:
    """A City database that opens fine but whose records holding ``damaged_postcodes`` do not decode.

    Each postcode's string is found in the data section and its control byte
    (UTF-8 string, length 5: 0x45) overwritten with 0: an extended type whose
    next byte (the postcode's first digit) names no type, so a lookup of that
    record raises ``maxminddb.InvalidDatabaseError`` while the others, and the
    header and metadata, read as before.
    """
    good = write_city_db(path.with_name("undamaged-" + path.name), networks)
    raw = bytearray(good.read_bytes())
    for code in damaged_postcodes:
        marked = b"\x45" + code.encode()
        at = raw.find(marked)
        assert len(code) == 5 and at > 0 and raw.find(marked, at + 1) < 0, code
        raw[at] = 0
    path.write_bytes(bytes(raw))
    return path


def damaged_networks(n: int) -> tuple[dict, set[str], set[str]]:
    """``n`` one-address networks 127.1.0.1.. (peer_address(0..n-1)) with distinct postcodes;
    every third one damaged. Returns (networks, damaged IPs, damaged postcodes)."""
    nets, bad_ips, bad_codes = {}, set(), set()
    for i in range(n):
        ip, code = f"127.1.0.{i + 1}", f"{10100 + i:05d}"
        nets[f"{ip}/32"] = ("Germany", "Berlin", code)
        if i % 3 == 0:
            bad_ips.add(ip)
            bad_codes.add(code)
    return nets, bad_ips, bad_codes


def test_a_damaged_database_opens_then_failing_lookups_are_unplaced_and_tallied(tmp_path):
    nets, bad_ips, bad_codes = damaged_networks(30)
    db = write_damaged_city_db(tmp_path / "damaged.mmdb", nets, bad_codes)
    loc = geo.open_locator(db)
    for _ in range(2):  # a failure is not cached: each failing lookup counts
        for i in range(30):
            ip = f"127.1.0.{i + 1}"
            want = geo.Place() if ip in bad_ips else geo.Place("Germany", "Berlin", f"{10100 + i:05d}")
            assert loc.locate(ip) == want, ip
            assert loc.locate_parsed(*canonical_ip(ip)) == want, ip
            assert loc.locate_packed(canonical_ip(ip)[0]) == want, ip
    assert loc.read_errors == 6 * len(bad_ips) == 60
    assert "InvalidDatabaseError" in loc.last_read_error and str(db) in loc.last_read_error
    assert "127.1.0." not in loc.last_read_error  # no peer address at rest
    with pytest.raises(ValueError):
        loc.locate("not-an-ip")  # a caller's bad argument is still an error, not a read error


def test_read_errors_are_counted_in_redis_and_the_visit_still_counts_the_ips(tmp_path, client, keys, settings):
    from crawler.counters import Recorder, top
    from crawler.counters.geo_errors import geo_error_report

    nets, bad_ips, bad_codes = damaged_networks(30)
    db = write_damaged_city_db(tmp_path / "damaged.mmdb", nets, bad_codes)
    rec = Recorder(client, keys, settings, geo.open_locator(db))
    h = "ab" * 20
    ips = [f"127.1.0.{i + 1}" for i in range(30)]
    assert geo_error_report(client, keys) is None
    assert rec.record_visit(h, ips, 1_700_000_000) == 30
    report = geo_error_report(client, keys)
    assert report["errors"] == len(bad_ips) and "InvalidDatabaseError" in report["last"]
    assert report["at"] == 1_700_000_000
    counts = {r["metric"]: r["count"] for r in top(client, keys, "countries", limit=100)}
    assert counts == {"countries.Germany.users": 30 - len(bad_ips)}
    assert rec.record_visit(h, ips, 1_700_000_100) == 0  # nothing new; the errors are tallied again
    assert geo_error_report(client, keys)["errors"] == 2 * len(bad_ips)


# Networks inside networks, each with its own place (a later, longer one overrides its part of the
# earlier), so an address's network may be any of several lengths; the rest is unmapped.
NESTED = {
    "10.0.0.0/8": ("Germany", "Berlin", "10115"),
    "10.1.0.0/16": ("Japan", "東京", "100-0001"),
    "10.1.2.0/24": ("Iceland", None, None),
    "10.1.2.3/32": ("France", "Paris", "75001"),
    "10.1.2.128/25": ("Brasil", "São Paulo", "01000-000"),
    "2001:db8::/32": ("India", "Mumbai", "400001"),
    "2001:db8:1::/48": ("Germany", "München", "80331"),
    "2001:db8:1:2::/64": ("United States", "St. Louis", "63101"),
}


def _nested_address(draw_v4: bool, a: int, b: int, c: int, d: int) -> str:
    """An address near the nested networks: 10.1.2.x and its neighbours, or 2001:db8:1:2:: and its."""
    if draw_v4:
        return f"{(9, 10, 11)[a % 3]}.{(0, 1, 2)[b % 3]}.{(1, 2, 3)[c % 3]}.{d % 256}"
    return f"2001:db{(7, 8, 9)[a % 3]}:{(0, 1, 2)[b % 3]}:{(1, 2, 3)[c % 3]}::{d % 65536:x}"


@pytest.fixture(scope="module")
def nested_db(tmp_path_factory):
    return write_city_db(tmp_path_factory.mktemp("nested") / "nested.mmdb", NESTED)


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), *[st.integers(0, 2**16)] * 4), min_size=1, max_size=300))
def test_an_address_takes_its_own_network_s_place_whatever_was_read_before(nested_db, draws):
    """The map of networks read answers exactly what reading the database answers, in any order of
    addresses, networks of every length nested in one another (geo.network_places)."""
    mapped, plain = geo.open_locator(nested_db, cache_size=1000), geo.open_locator(nested_db, cache_size=0)
    small = geo.open_locator(nested_db, cache_size=3)  # starts over every three networks
    for draw in draws:
        ip = _nested_address(*draw)
        assert mapped.locate(ip) == small.locate(ip) == plain.locate(ip), ip
        # past the LRU of addresses: straight to the networks
        assert mapped._locate(ip) == plain.locate(ip), ip
        # an address already parsed (the recorder's, which keeps its own memory of addresses)
        packed, text = canonical_ip(ip)
        assert mapped.locate_parsed(packed, text) == small.locate_parsed(packed, text) == plain.locate(ip), ip
        # given packed alone (its text made only when its network was not read before)
        assert mapped.locate_packed(packed) == small.locate_packed(packed) == plain.locate_packed(packed) \
            == plain.locate(ip), ip


def test_another_address_of_a_network_read_is_not_read_again(nested_db):
    loc = geo.open_locator(nested_db)
    assert loc.locate("10.200.0.1") == geo.Place("Germany", "Berlin", "10115")  # the /8
    read = []
    loc._db = _Counting(loc._db, read)
    # the tree holds what the /16 leaves of the /8 as networks of their own: 10.128.0.0/9 here
    assert loc.locate("10.201.0.1") == geo.Place("Germany", "Berlin", "10115")
    assert loc.locate("10.1.77.1") == geo.Place("Japan", "東京", "100-0001")  # in 10.1.64.0/18: read
    assert loc.locate("10.1.2.3") == geo.Place("France", "Paris", "75001")  # a /32: read
    assert loc.locate("10.1.88.1") == geo.Place("Japan", "東京", "100-0001")  # 10.1.64.0/18 again
    assert read == ["10.1.77.1", "10.1.2.3"]


class _Counting:
    """A database reader that notes each address it is asked for."""

    def __init__(self, db, read: list):
        self._db, self._read = db, read

    def get_with_prefix_len(self, addr):
        self._read.append(addr)
        return self._db.get_with_prefix_len(addr)
