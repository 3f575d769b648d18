"""Geolocation of peer IPs (SPEC §5): GeoIP2/GeoLite2 City lookups.

``Locator(settings)`` opens ``GEOIP_DB`` (else the GeoLite2 City database
bundled by ``maxminddb-geolite2``, data from 2018, with a warning) and answers
``locate(ip) -> Place`` through an LRU cache.
"""

from geo.locator import Locator, Place, bundled_database_path, open_locator

__all__ = ["Locator", "Place", "bundled_database_path", "open_locator"]
