"""Geolocation of peer IPs: GeoIP2/GeoLite2 City lookups, one floor above the base.

``locator`` (``Locator``) opens ``GEOIP_DB`` (else the GeoLite2 City
database bundled by ``maxminddb-geolite2``, data from 2018, with a warning)
and answers ``locate(ip) -> Place`` through an LRU cache, counting read
errors; ``name_bound`` is the byte bound a place name must meet to be
counted (StatHat's stat names are at most 255 characters). See the
contract, §5.
"""

from geo.locator import Locator, Place, bundled_database_path, open_locator

__all__ = ["Locator", "Place", "bundled_database_path", "open_locator"]
