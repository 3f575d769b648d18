"""Write small GeoIP2 City databases for tests with mmdb-writer.

``write_city_db(path, networks)`` takes ``{cidr: Place-like dict}`` and writes
an IPv6 database (IPv4 mapped in, as MaxMind's own City databases are) whose
records have the shape geoip2's City model reads: ``country.names.en``,
``city.names.en``, ``postal.code``. ``SAMPLE`` is the database most tests use:
non-ASCII names, a city with a dot in its name, a country without city or
postcode, and addresses left unmapped.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from mmdb_writer import MMDBWriter
from netaddr import IPSet

# cidr -> (country, city, postcode); None parts are left out of the record.
SAMPLE: dict[str, tuple[str | None, str | None, str | None]] = {
    "1.1.1.0/24": ("Germany", "München", "80331"),
    "1.1.2.0/24": ("Germany", "Berlin", "10115"),
    "2.2.2.0/24": ("United States", "St. Louis", "63101"),
    "3.3.3.0/24": ("Côte d'Ivoire", "Yamoussoukro", None),
    "4.4.4.0/24": ("Iceland", None, None),  # a country without city or postcode
    "5.5.5.0/24": ("Japan", "東京", "100-0001"),
    "2001:db8:1::/48": ("Germany", "Berlin", "10117"),
    "2001:db8:2::/48": ("Brasil", "São Paulo", "01000-000"),
    # 9.9.9.0/24, 10.0.0.0/8 and 2001:db8:9::/48 are deliberately unmapped.
}

UNMAPPED = ("9.9.9.9", "10.1.2.3", "2001:db8:9::1")


def record(country: str | None, city: str | None, postcode: str | None) -> dict:
    """A City record as MaxMind lays it out (English names only)."""
    out: dict = {}
    if country is not None:
        out["country"] = {"names": {"en": country}, "iso_code": "XX", "geoname_id": zlib.crc32(country.encode()) % 10**7}
    if city is not None:
        out["city"] = {"names": {"en": city}, "geoname_id": zlib.crc32(city.encode()) % 10**7}
    if postcode is not None:
        out["postal"] = {"code": postcode}
    return out


def write_city_db(path: Path, networks: dict[str, tuple] = SAMPLE) -> Path:
    """Write a City database holding ``networks`` to ``path``; returns ``path``."""
    w = MMDBWriter(
        ip_version=6,
        ipv4_compatible=True,
        database_type="GeoLite2-City",
        languages=["en"],
        description="peercrawl test City database",
    )
    for cidr, parts in networks.items():
        w.insert_network(IPSet([cidr]), record(*parts))
    w.to_db_file(str(path))
    return Path(path)


def write_country_db(path: Path) -> Path:
    """A database of the wrong type (Country), to test the start-up check."""
    w = MMDBWriter(ip_version=4, database_type="GeoLite2-Country", languages=["en"], description="x")
    w.insert_network(IPSet(["1.1.1.0/24"]), {"country": {"names": {"en": "Germany"}}})
    w.to_db_file(str(path))
    return Path(path)
