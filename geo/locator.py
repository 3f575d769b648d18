"""City lookups, cached by address and by database network, on GEOIP_DB or the bundled 2018 GeoLite2.

Strategy: the database is opened (and checked to be a City database) when the
``Locator`` is built, so a missing, unreadable or wrong ``GEOIP_DB`` fails at
start with one clear ``GeoError`` instead of on the first peer. Lookups never
raise for an address the database does not know (private ranges, an IPv6
address in an IPv4-only database): they answer an empty ``Place``. Nor for a
database damaged past its header (it opens, then some records do not decode):
such a lookup is a read error, answered with an empty ``Place`` (the peer
still counts for its torrent) and tallied in ``read_errors`` and
``last_read_error`` for the recorder to publish (``status`` shows it); it is
not cached, so each failing lookup counts. Names are
GeoIP's English names, raw (control characters too: they are counts' keys,
made harmless where they are shown); turning them into metric names is the
counters' job (``crawler.counters.names``). The one thing checked here is
their length: a name longer than a metric's name may hold
(``name_bound.MAX_NAME_BYTES``) is left out of the ``Place`` (a city or postcode:
that part is unknown; a country: the whole place, which needs it), so a
``Place`` from a locator never holds one. Each is tallied in
``name_errors`` and ``last_name_error`` when the database is read; the
place is cached as it came out, so a cached answer is not counted again.
Below the LRU of addresses, the places of the database networks read are
kept (``geo.network_places``): another address of a network already read
takes its place without decoding the record again, which is most of a
lookup's cost.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import ipaddress
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import geoip2.database
import maxminddb

from crawler import logs
from crawler.errors import GeoError
from geo.name_bound import MAX_NAME_BYTES, NameTooLong, escaped_bytes, fits
from geo.network_places import NetworkPlaces

log = logs.get("geo")

_README = "see GeoLite2.mmdb.README"
# Bytes read from each end of the database for its identity (``_identity``).
IDENTITY_SPAN = 1 << 16


@dataclass(frozen=True)
class Place:
    """Where an IP is: English names, each ``None`` where the database does not know (from a
    ``Locator``: or where it is longer than a metric's name may hold)."""

    country: str | None = None
    city: str | None = None
    postcode: str | None = None

    @property
    def empty(self) -> bool:
        """No part is known (the address is unmapped)."""
        return self.country is None and self.city is None and self.postcode is None


NOWHERE = Place()


def bundled_database_path() -> Path:
    """Path of the GeoLite2-City.mmdb shipped inside the maxminddb-geolite2 package.

    The package keeps it in its private ``_maxminddb_geolite2`` module directory.
    Raises ``GeoError`` if that package is not installed.
    """
    try:
        from _maxminddb_geolite2 import geolite2_database
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise GeoError(f"GEOIP_DB is unset and maxminddb-geolite2 is not installed ({_README})") from e
    return Path(geolite2_database())


class Locator:
    """GeoIP City lookups for one database, with an LRU cache.

    ``Locator(settings)`` uses ``settings.geoip_db`` (None: the bundled
    database) and ``settings.geo_cache_size`` (0: no cache). Raises
    ``GeoError`` when the database is missing, unreadable or not a City
    database.
    """

    def __init__(self, settings) -> None:
        self._open(settings.geoip_db, settings.geo_cache_size)

    @classmethod
    def open(cls, path: Path | str | None, cache_size: int = 100_000) -> "Locator":
        """A locator on ``path`` (None: the bundled database); raises ``GeoError``."""
        obj = cls.__new__(cls)
        obj._open(None if path is None else Path(path), cache_size)
        return obj

    def _open(self, path: Path | None, cache_size: int) -> None:
        self.bundled = path is None
        self.path = bundled_database_path() if path is None else Path(path)
        what = "the bundled GeoLite2 database" if self.bundled else "GEOIP_DB"
        if not self.path.is_file():
            raise GeoError(f"{what}: {self.path} does not exist or is not a file ({_README})")
        try:
            self._reader = geoip2.database.Reader(str(self.path), locales=["en"])
        except (OSError, ValueError, maxminddb.InvalidDatabaseError) as e:
            raise GeoError(f"{what}: cannot read {self.path} as a MaxMind database: {e} ({_README})") from e
        meta = self._reader.metadata()
        self.database_type = meta.database_type
        if "City" not in meta.database_type:
            self._reader.close()
            raise GeoError(
                f"{what}: {self.path} is a {meta.database_type!r} database; a GeoLite2/GeoIP2 City "
                f"database is needed ({_README})"
            )
        self.built = _dt.datetime.fromtimestamp(meta.build_epoch, _dt.UTC)
        self.ip_version = meta.ip_version
        self.identity = _identity(self.path, meta)
        if self.bundled:
            log.warning(
                "geoip_bundled_database",
                path=str(self.path),
                built=self.built.date().isoformat(),
                message=(
                    f"GEOIP_DB is unset: using the GeoLite2 City database bundled by maxminddb-geolite2, "
                    f"whose data is from {self.built.year}; places are out of date ({_README})"
                ),
            )
        self._db = self._reader._db_reader  # geoip2 exposes no other way to its maxminddb reader
        self.read_errors = 0
        self.last_read_error: str | None = None
        self.name_errors = 0
        self.last_name_error: str | None = None
        self._cached = lru_cache(maxsize=cache_size)(self._locate) if cache_size > 0 else self._locate
        # the places of the networks read (geo.network_places): as many networks as IPs in the LRU
        self._v4: NetworkPlaces[Place] | None = NetworkPlaces(32, cache_size) if cache_size > 0 else None
        self._v6: NetworkPlaces[Place] | None = NetworkPlaces(128, cache_size) if cache_size > 0 else None

    def locate(self, ip: str) -> Place:
        """The ``Place`` of ``ip`` (text form); raises ``ValueError`` if it is not an IP.

        A read error of the database answers ``NOWHERE`` and is tallied.
        """
        try:
            return self._cached(ip)
        except _ReadError as e:
            return self._read_failed(e)

    def locate_parsed(self, packed: bytes, text: str) -> Place:
        """``locate`` of an address already parsed: its packed form (4 or 16 bytes, an IPv4-mapped
        IPv6 address as its IPv4) and canonical text, as ``crawler.counters.ip_forms.canonical_ip``
        gives them. Not through the LRU of texts: a caller that keeps its own memory of the
        addresses met (the recorder's) would only pay for a second one that always misses; the
        networks' places still answer."""
        try:
            return self._place_of(packed, text, text)
        except _ReadError as e:
            return self._read_failed(e)

    def locate_packed(self, packed: bytes) -> Place:
        """``locate_parsed`` of an address given packed alone (as ``locate_parsed`` takes it): its text is
        made only when the network holding it was not read before (most addresses of a crawl are new
        to a process, few of their networks are)."""
        if len(packed) == 4 and self._v4 is not None:
            place = self._v4.get(int.from_bytes(packed, "big"))
            if place is not None:
                return place
        text = _ntop(_AF_INET, packed) if len(packed) == 4 else str(ipaddress.ip_address(packed))
        return self.locate_parsed(packed, text)

    def _read_failed(self, e: _ReadError) -> Place:
        """A lookup that hit damaged data: tallied, answered ``NOWHERE``."""
        self.read_errors += 1
        self.last_read_error = str(e)
        return NOWHERE

    def _locate(self, ip: str) -> Place:
        try:
            packed = _pton(_AF_INET, ip)  # dotted-quad IPv4: straight to the database's C reader
        except (OSError, TypeError, ValueError):  # ValueError: a NUL or a lone surrogate
            pass
        else:
            return self._place_of(packed, ip, ip)
        addr = ipaddress.ip_address(ip)
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return self._place_of(addr.packed, str(addr), ip)

    def _place_of(self, packed: bytes, addr: str, ip: str) -> Place:
        """The place of an address: ``packed`` (an IPv4-mapped IPv6 address as its IPv4), ``addr``
        its canonical text, ``ip`` as given (for the error text); an IPv6 address in an IPv4-only
        database is unplaced."""
        if len(packed) == 4:
            return self._in_network(self._v4, int.from_bytes(packed, "big"), addr, ip)
        if self.ip_version == 4:
            return NOWHERE
        return self._in_network(self._v6, int.from_bytes(packed, "big"), addr, ip)

    def _in_network(self, networks: NetworkPlaces[Place] | None, x: int, addr: str, ip: str) -> Place:
        """The place of ``addr`` (canonical text, ``x`` as an integer; ``ip`` as given): from the
        network it is in when one was read before (``networks``; None: none kept), else read."""
        if networks is None:
            return self._record(addr, ip)[0]
        place = networks.get(x)
        if place is None:
            place, length = self._record(addr, ip)
            place = networks.put(x, length, place)
        return place

    def _record(self, addr: str, ip: str) -> tuple[Place, int]:
        """The place of ``addr`` (canonical text; ``ip`` as given, for the error text) and the
        prefix length of the database network holding it.

        Read with maxminddb's C reader, picking the three English names
        geoip2's City model would give (``names["en"]``, ``postal.code``):
        building the model cost more than the lookup itself.
        """
        try:
            # read as whatever it holds: a damaged database's record may be anything, and
            # any failure to read it is the except below
            r: Any
            r, length = self._db.get_with_prefix_len(addr)
            if r is None:
                return NOWHERE, length
            place = Place(
                country=_clean(_name(r.get("country"))),
                city=_clean(_name(r.get("city"))),
                postcode=_clean((r.get("postal") or {}).get("code")),
            )
        except Exception as e:  # noqa: BLE001 - damaged data raises anything: InvalidDatabaseError, struct, Unicode, Type...
            # no peer address at rest (contract §4): the message may quote it
            msg = str(e).replace(addr, "<ip>").replace(ip, "<ip>")
            raise _ReadError(f"{self.path}: a lookup failed: {type(e).__name__}: {msg}"[:300]) from e
        if fits(place.country or "") and fits(place.city or "") and fits(place.postcode or ""):
            return place, length
        return self._bounded(place), length

    def _bounded(self, place: Place) -> Place:
        """``place`` without its names over the bound, each tallied in ``name_errors``."""
        country, city, postcode = place.country, place.city, place.postcode
        if country is not None and not fits(country):
            self._name_error("country", country, "the whole place (a city or postcode needs its country)")
            return NOWHERE
        if city is not None and not fits(city):
            self._name_error("city", city, "its city")
            city = None
        if postcode is not None and not fits(postcode):
            self._name_error("postcode", postcode, "its postcode")
            postcode = None
        return Place(country, city, postcode)

    def _name_error(self, part: str, name: str, unplaced: str) -> None:
        e = NameTooLong(part, escaped_bytes(name))
        self.name_errors += 1
        self.last_name_error = f"{e.kind}: {self.path}: {e}; the IP counts as unplaced for {unplaced}"

    def cache_info(self):
        """functools cache statistics (None when the cache is off)."""
        return getattr(self._cached, "cache_info", lambda: None)()

    def close(self) -> None:
        """Close the database (its memory map)."""
        self._reader.close()

    def __enter__(self) -> "Locator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ReadError(Exception):
    """A lookup hit damaged data (never cached: ``locate`` turns it into NOWHERE)."""


def _identity(path: Path, meta) -> bytes:
    """What decides the place of every address a locator gives: its database's metadata, size and
    first and last ``IDENTITY_SPAN`` bytes (its search tree's top and its data and metadata's end;
    hashing all of it would cost a start ~0.1 s), and the bound on names. The same file gives the same
    identity on every machine, wherever it lies and whatever its modification time, so a swarm record
    keyed by its peers' addresses and this (``crawler.counters.swarm_record``) serves a whole fleet."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        h.update(f.read(IDENTITY_SPAN))
        size = f.seek(0, 2)
        f.seek(max(0, size - IDENTITY_SPAN))
        h.update(f.read())
    parts = (meta.database_type, meta.build_epoch, meta.node_count, meta.ip_version, meta.record_size, size,
             MAX_NAME_BYTES, h.hexdigest())
    return "\0".join(map(str, parts)).encode()


def open_locator(path: Path | str | None = None, cache_size: int = 100_000) -> Locator:
    """``Locator.open``: a locator on ``path``, None meaning the bundled database."""
    return Locator.open(path, cache_size)


def _name(record) -> str | None:
    """A record's English name, as geoip2's ``.name`` with ``locales=["en"]``."""
    return (record.get("names") or {}).get("en") if record else None


def _clean(name: str | None) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"a name is a {type(name).__name__}, not text")
    name = name.strip()
    return name or None


_pton, _ntop, _AF_INET = socket.inet_pton, socket.inet_ntop, socket.AF_INET
