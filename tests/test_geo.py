"""geo.Locator on a small City database written by the test, and on the bundled GeoLite2."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

import geo
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
