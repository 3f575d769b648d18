"""Metric names of contract §4 and the sorted-set indexes that hold their counts.

Name rules (docs/metrics.md):

- places are GeoIP's English names, trimmed; an empty name counts as unknown;
- ``<info-hash>`` is 40 lower-case hex characters;
- inside a name, ``%`` becomes ``%25`` and ``.`` becomes ``%2E`` (percent
  escaping, so ``St. Louis`` is ``St%2E Louis``): a metric name splits on
  ``.`` unambiguously and the original name can be recovered exactly;
- a name holds at most ``MAX_NAME_BYTES`` bytes once escaped (``fits``, both
  in ``geo.name_bound``, which says why that bound); a longer one is no name:
  the IP counts as unplaced for that part. Any other character is kept as it
  came, control characters too: a name is a count's key, so it is made
  harmless where it is shown (``crawler.safe_text``), never where it is stored.

Strategy: a counter is not a Redis key of its own. Each metric's count lives
as the score of a member in one or two sorted sets ("indexes"), one per
family and scope, e.g. all cities of Germany, or all countries of one
torrent. Every index a metric belongs to is incremented by the same delta in
the same Lua step, so they agree, and ``stats`` is one ZREVRANGE (no SCAN).
A member is the part of the metric name the index's scope does not fix
(``Berlin`` in the cities-of-Germany index, ``Germany.Berlin`` in one
torrent's cities index), which keeps millions of counters small. There is no
index of all cities (or postcodes): it would hold the same counts as the
per-country ones and cost a fifth more writes per new peer, so ``stats
cities`` merges the per-country rankings (``Query.across_countries``).

Index keys: ``ix:<period>:<family>[:t:<info-hash>][:c:<country>]``, where the
period is ``all`` (lifetime) or ``YYYY-MM`` (the month counter
``<metric>.<YYYY-MM>``, UTC). One torrent's indexes (``:t:<info-hash>``)
are one hash, sorted when read (bounded by the torrent's peers): a new
torrent's first visit fills it with ~100 members at once, which a small
sorted set inserts one at a time in order (a tenth of that visit's Redis
time). Its three families share the hash of its countries, a member behind
its family's prefix (``TORRENT_FIELD``; ``counters/torrent_index.py``).
Every other index is a sorted set.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

FAMILIES = ("countries", "cities", "postcodes", "torrents")
LIFETIME = "all"

_HEX40 = re.compile(r"^[0-9a-fA-F]{40}$")
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def escape(name: str | None) -> str | None:
    """A place name as it appears inside a metric name; None if unknown or blank.

    ``geo.name_bound.escaped_bytes`` counts the bytes of its result by the same rule.
    """
    if name is None:
        return None
    name = name.strip()
    if not name:
        return None
    return name.replace("%", "%25").replace(".", "%2E")


def unescape(part: str) -> str:
    """The original name of an escaped metric part (inverse of ``escape``)."""
    return part.replace("%2E", ".").replace("%25", "%")


def readable(metric: str) -> str:
    """A metric name as a person reads it: every name in it unescaped (``St. Louis``, not ``St%2E Louis``).

    For showing only: a name holding a dot no longer splits exactly, so
    the exact name (what StatHat and ``--json`` carry) stays the key.
    """
    return ".".join(unescape(p) for p in metric.split("."))


# The column of a place family's name, as ``export``'s files and ``stats --json``'s rows call it.
PLACE_COLUMN = {"cities": "city", "postcodes": "postcode"}
PLACE_KEYS = ("country", "city", "postcode")
# The label of the row of peers no place of a list holds (``rankings.unplaced``).
UNPLACED = "unplaced"
# The country an IP no country holds is counted under, in Redis only: the one count of the peers
# the database cannot place across every country, which nothing else could give (an IP counts once
# per country, and no count of all distinct IPs is kept). ``escape`` writes every "%" as "%25", so no
# place's name is ever this member. Every reader leaves it out of its places (``is_place``) and shows
# it as the unplaced row; record.lua and places.lua never post it to StatHat (they spell it too).
UNPLACED_MEMBER = "%unplaced"


# A torrent's one hash holds its three families: a member of its index of ``family`` is the field
# ``TORRENT_FIELD[family] + member`` (an escaped name never starts with "%c" or "%p"; record.lua
# spells them too).
TORRENT_FIELD = {"countries": "", "cities": "%c", "postcodes": "%p"}


def is_place(member: str | bytes) -> bool:
    """False for ``UNPLACED_MEMBER`` (as stored or decoded), True for a place's escaped name."""
    return member not in (UNPLACED_MEMBER, UNPLACED_MEMBER.encode())


def read_metric(metric: str) -> dict[str, str]:
    """The parts of a metric name (``metrics_for``'s, or its month counter), the names unescaped.

    Keys, those the name has: ``info_hash``, ``country``, ``city`` or
    ``postcode``, ``month``. ``torrents.<h>.countries.United States.cities.St%2E Louis.users.2024-05``
    gives ``{"info_hash": h, "country": "United States", "city": "St. Louis", "month": "2024-05"}``.
    """
    parts = metric.split(".")  # escaped names hold no dot: the split is exact
    out: dict[str, str] = {}
    if parts[-1] != "users":
        out["month"] = parts.pop()
    parts.pop()  # "users"
    if parts[0] == "torrents":
        out["info_hash"] = parts[1]
        parts = parts[2:]
    if len(parts) >= 2:  # "countries", <country>[, <family>, <name>]
        out["country"] = unescape(parts[1])
    if len(parts) == 4:
        out[PLACE_COLUMN[parts[2]]] = unescape(parts[3])
    return out


def info_hash_hex(info_hash: str) -> str:
    """``info_hash`` as 40 lower-case hex characters; raises ``ValueError`` otherwise."""
    if not isinstance(info_hash, str) or not _HEX40.match(info_hash):
        raise ValueError(f"not a 40-hex info-hash: {info_hash!r}")
    return info_hash.lower()


def month_of(now: float) -> str:
    """The UTC month ``YYYY-MM`` of unix time ``now``."""
    return _dt.datetime.fromtimestamp(now, _dt.UTC).strftime("%Y-%m")


def check_month(month: str) -> str:
    """``month`` if it is ``YYYY-MM``; raises ``ValueError`` otherwise."""
    if not _MONTH.match(month):
        raise ValueError(f"not a YYYY-MM month: {month!r}")
    return month


@dataclass(frozen=True)
class Metric:
    """One §4 metric: its lifetime name, StatHat family, and where its count lives.

    ``indexes`` holds ``(scope, member)`` pairs; ``scope`` is the tuple of
    key parts after ``ix:<period>``.
    """

    name: str
    family: str  # the StatHat family: "countries" or "torrents"
    indexes: tuple[tuple[tuple[str, ...], str], ...]


def metrics_for(info_hash: str, country: str | None, city: str | None, postcode: str | None) -> list[Metric]:
    """The §4 metrics one IP of ``info_hash`` at that place counts for.

    ``info_hash`` must already be lower-case hex; the place parts are raw
    GeoIP names (escaped here). The first metric is always
    ``torrents.<info-hash>.users``; the others need the parts that are known
    (a city or postcode needs its country).
    """
    h = info_hash
    out = [Metric(f"torrents.{h}.users", "torrents", ((("torrents",), h),))]
    c = escape(country)
    if c is None:
        return out
    out.append(Metric(f"countries.{c}.users", "countries", ((("countries",), c),)))
    out.append(
        Metric(
            f"torrents.{h}.countries.{c}.users",
            "torrents",
            ((("countries", "t", h), c), (("torrents", "c", c), h)),
        )
    )
    for family, part in (("cities", escape(city)), ("postcodes", escape(postcode))):
        if part is None:
            continue
        out.append(
            Metric(
                f"countries.{c}.{family}.{part}.users",
                "countries",
                (((family, "c", c), part),),
            )
        )
        out.append(
            Metric(
                f"torrents.{h}.countries.{c}.{family}.{part}.users",
                "torrents",
                (((family, "t", h), f"{c}.{part}"),),
            )
        )
    return out


def hashed(scope: tuple[str, ...]) -> bool:
    """Whether the index of ``scope`` is a HASH (one torrent's) rather than a ZSET."""
    return len(scope) > 1 and scope[1] == "t"


@dataclass(frozen=True)
class Query:
    """Which index answers a ``stats`` query and how its members read as metrics."""

    scope: tuple[str, ...]
    # The metric name of member m is parts[0] + m + parts[1]; for members
    # "<country>.<name>" (three parts) parts[0] + country + parts[1] + name + parts[2].
    # Literal pieces, never a format string, so names holding "{" stay intact.
    parts: tuple[str, ...]
    member: str | None = None  # a single member (ZSCORE) instead of a ranking
    # Only members starting with this (a torrent's cities or postcodes of one
    # country, read from the torrent's index, which holds "<country>.<name>").
    prefix: str | None = None
    # No index of its own: the scope is (family, "c") and each country's
    # index (scope + (country,)) is ranked, then merged; members read as
    # "<country>.<name>" (all cities or postcodes, every country).
    across_countries: bool = False


def query_for(family: str, torrent: str | None = None, country: str | None = None) -> Query:
    """The index of ``stats <family> [--torrent H] [--country NAME]``.

    ``torrent`` is 40-hex, ``country`` a raw English name. Raises
    ``ValueError`` on an unknown family or a bad hash.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    h = info_hash_hex(torrent) if torrent is not None else None
    c = escape(country) if country is not None else None
    if country is not None and c is None:
        raise ValueError("--country must not be empty")
    if family == "countries":
        if h is None:
            return Query(("countries",), ("countries.", ".users"), c)
        return Query(("countries", "t", h), (f"torrents.{h}.countries.", ".users"), c)
    if family == "torrents":
        if c is None:
            return Query(("torrents",), ("torrents.", ".users"), h)
        return Query(("torrents", "c", c), ("torrents.", f".countries.{c}.users"), h)
    # cities / postcodes: members are "<country>.<name>" unless the country is fixed
    if h is None and c is None:
        return Query((family, "c"), ("countries.", f".{family}.", ".users"), across_countries=True)
    if h is None:
        assert c is not None  # both None returned above
        return Query((family, "c", c), (f"countries.{c}.{family}.", ".users"))
    if c is None:
        return Query((family, "t", h), (f"torrents.{h}.countries.", f".{family}.", ".users"))
    # No index of its own (it would cost two more writes per new peer): the
    # torrent's index filtered by "<country>." (escaped names hold no dot).
    return Query((family, "t", h), (f"torrents.{h}.countries.", f".{family}.", ".users"), prefix=c + ".")


def metric_of(query: Query, member: str) -> str:
    """The metric name of ``member`` in the index of ``query``."""
    p = query.parts
    if len(p) == 3:
        # Both parts are escaped, so the first "." splits them.
        c, _, name = member.partition(".")
        return p[0] + c + p[1] + name + p[2]
    return p[0] + member + p[1]
