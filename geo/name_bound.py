"""The byte bound a place name must meet to be counted: ``MAX_NAME_BYTES``, ``fits``.

A GeoIP name becomes part of metric names (``crawler.counters.names``),
where it is escaped: ``.`` and ``%`` take three bytes each (``%2E``,
``%25``). The bound is on that escaped UTF-8, the form every consumer of a
metric name sees. The locator holds every ``Place`` it answers to it, and
the counters read a name that is over it anyway as unknown; both take the
bound, its measure (``escaped_bytes``) and its error (``NameTooLong``) from
here.
"""

from __future__ import annotations

# The longest place name a metric holds: bytes of UTF-8, escaped. It is set by
# the tightest consumer, StatHat, whose stat names are at most 255 characters:
# the longest name posted, torrents.<h>.countries.<c>.postcodes.<z>.users, has
# 77 characters besides its two names, and 77 + 2 * 88 = 253. Every other
# consumer takes more: the scripts read a name after a u16 length (65,535
# bytes, ``crawler.counters.places.lua_string``), Redis members and CSV cells
# take anything.
# Real names are well inside it: the longest English names in a GeoLite2 City
# database are 44 bytes (a country), 49 (a city) and 8 (a postcode), and the
# longest place name in use anywhere has 85 letters.
MAX_NAME_BYTES = 88
# Characters a name may hold and still fit for certain (4 UTF-8 bytes at most
# each, and an escape is 3): shorter names skip the exact count.
_SURELY_FITS = MAX_NAME_BYTES // 4


def escaped_bytes(name: str) -> int:
    """How many bytes ``name`` (raw, trimmed) takes inside a metric name: its escaped UTF-8
    (``.`` and ``%`` three bytes each, as ``crawler.counters.names.escape`` writes them)."""
    return len(name.encode("utf-8", "surrogatepass")) + 2 * (name.count(".") + name.count("%"))


def fits(name: str) -> bool:
    """Whether ``name`` (raw, trimmed) is within ``MAX_NAME_BYTES`` once escaped."""
    return len(name) <= _SURELY_FITS or escaped_bytes(name) <= MAX_NAME_BYTES


class NameTooLong(ValueError):
    """A place name over ``MAX_NAME_BYTES`` once escaped; ``part`` says which (country, city,
    postcode) and ``size`` its escaped bytes. ``kind`` names the error where it is counted."""

    kind = "name_too_long"

    def __init__(self, part: str, size: int):
        super().__init__(f"a {part} name of {size:,} bytes is over the {MAX_NAME_BYTES}-byte bound of a metric's name")
        self.part, self.size = part, size
