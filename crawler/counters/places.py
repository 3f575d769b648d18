"""A place's escaped names and metric fingerprints, laid out as record.lua reads them.

``PlaceInfo`` is built once per place a process sees (the recorder caches
it) and turns each IP's record into one multiply and one XOR: see its
docstring for the lanes. ``lua_string`` is the length-prefixed UTF-8 that
record.lua reads names in.

A name over ``geo.name_bound.MAX_NAME_BYTES`` never reaches a script: the locator
drops such names (``geo.locator``), and a ``PlaceInfo`` built from a place
that holds one anyway reads that part as unknown, as the locator would, and
says so in ``dropped`` (the recorder counts it with the GeoIP errors).
"""

from __future__ import annotations

from crawler.counters.marks import Fingerprinter
from crawler.counters.names import UNPLACED_MEMBER, escape
from geo.name_bound import MAX_NAME_BYTES, NameTooLong, escaped_bytes, fits


class PlaceInfo:
    """A place's escaped names and its metric fingerprints, in record.lua's slot order.

    The slots are: the torrent's users metric, then country, torrent-country,
    city, torrent-city, postcode, torrent-postcode (the parts the place has):
    ``k`` of them, laid out the torrent's first (users, torrent-country,
    torrent-city, torrent-postcode), then the place's, so that record.lua
    takes a new torrent's in one piece; when k >= 3 the IP's group record
    for (torrent, place) goes first (``"g"`` + the place's names, XOR the
    torrent). An IP's
    record in record.lua's ``ips`` argument is built as one integer: a 9-byte
    header (roster bucket, torrent bucket, place bucket, place number, k) and the 8-byte
    fields, field i = ``low64(ip) XOR metric_i``. So that costs one multiply
    and one XOR per IP, the metrics sit in lanes of one integer: ``g`` holds
    the global metrics (0 in torrent lanes), ``tr`` has a 1 in the low bit of
    every torrent lane (the torrent's fingerprint is XORed into those per
    visit: ``g ^ t_fp * tr``) and ``r`` in every lane (``low64 * r`` repeats
    the IP's half in each).


    Crawls of several counter shards record an IP in two parts (see
    ``recorder``): its torrent metrics, with the group record first, in the
    torrent's shard (``t_*``: every lane a torrent lane, so the lanes are
    ``t_g ^ t_fp * t_r``; an 11-byte header: roster bucket, torrent bucket, the
    place part's oldest mark time, place number, k), and its place metrics in its own
    shard (``p_*``: lanes ``p_g``; a 5-byte header: bucket, place number, m).
    """

    __slots__ = ("country", "country_s", "dropped", "g", "gshift", "k", "nbytes", "p_bshift", "p_g", "p_m", "p_nbytes",
                 "p_r", "p_shift", "r", "rshift", "shift", "t_bshift", "t_g", "t_g96", "t_k", "t_nbytes", "t_oshift",
                 "t_r", "t_r96", "t_rbits", "t_rbytes", "t_rmask", "t_rshift", "t_shift", "tail", "tr", "tshift")

    def __init__(self, pkey: tuple, fps: Fingerprinter):
        # names over the bound read as unknown (a city or postcode needs its country)
        self.dropped: list[NameTooLong] = []
        c = self._bounded("country", pkey[0])
        y = self._bounded("city", pkey[1]) if c is not None else None
        z = self._bounded("postcode", pkey[2]) if c is not None else None
        if c is None:  # counted under the member of no place (names.UNPLACED_MEMBER), never a city
            c = UNPLACED_MEMBER
        self.country = c
        # the names as record.lua reads them (length-prefixed UTF-8; empty = unknown)
        self.country_s = None if c is None else lua_string(c)
        self.tail = lua_string(y or "") + lua_string(z or "")
        slots: list[tuple[int, bool]] = [(0, True)]  # (global fingerprint, is a torrent metric)
        if c is not None:
            name = f"countries.{c}"
            slots += [(fps.place(name), False), (fps.place("t" + name), True)]
            for family, part in (("cities", y), ("postcodes", z)):
                if part is not None:
                    name = f"countries.{c}.{family}.{part}"
                    slots += [(fps.place(name), False), (fps.place("t" + name), True)]
        self.k = len(slots)
        torrent = [g for g, t in slots if t]
        place = [g for g, t in slots if not t]
        slots = [(g, True) for g in torrent] + [(g, False) for g in place]  # the torrent's first
        if self.k >= 3:
            # the group record of (IP, torrent, place), first (see record.lua)
            slots.insert(0, (fps.place("g" + ".".join(n or "" for n in (c, y, z))), True))
        lanes = len(slots)
        self.g = self.tr = self.r = 0
        for i, (g, t) in enumerate(slots):  # the first slot in the highest lane
            lane = 64 * (lanes - 1 - i)
            self.g |= g << lane
            self.r |= 1 << lane
            if t:
                self.tr |= 1 << lane
        self.shift = 64 * lanes  # where the place number and k go
        self.gshift = self.shift + 24  # where the place marks' bucket number goes
        self.tshift = self.shift + 40  # where the torrent marks' bucket number goes
        self.rshift = self.shift + 56  # where the group record's bucket number goes (0: none)
        self.nbytes = 9 + 8 * lanes
        self.t_k, self.p_m = len(torrent), len(place)
        if self.k >= 3:
            torrent.insert(0, slots[0][0])  # the group record
        self.t_g, self.t_r = _lanes(torrent)
        self.t_g96, self.t_r96 = _lanes(torrent, 96, 32)
        # ``torrent_records``' torrent marks: their bits below the group record's, their mask and bytes
        self.t_rbits = 96 * self.t_k
        self.t_rmask, self.t_rbytes = (1 << self.t_rbits) - 1, 12 * self.t_k
        self.t_shift = 64 * len(torrent)
        self.t_oshift = self.t_shift + 24
        self.t_bshift = self.t_shift + 56
        self.t_rshift = self.t_shift + 72
        self.t_nbytes = 11 + 8 * len(torrent)
        self.p_g, self.p_r = _lanes(place)
        self.p_shift = 64 * len(place)
        self.p_bshift = self.p_shift + 24
        self.p_nbytes = 5 + 8 * len(place)

    def lanes(self, t_fp: int) -> int:
        """The whole record's metric lanes for the torrent of fingerprint ``t_fp``."""
        return self.g ^ t_fp * self.tr

    def torrent_lanes(self, t_fp: int) -> int:
        """The torrent part's metric lanes for the torrent of fingerprint ``t_fp``."""
        return self.t_g ^ t_fp * self.t_r

    def torrent_records(self, t_fp: int, stamp: int) -> int:
        """``torrent_lanes`` as the 12-byte mark records of a block (record.lua): each lane 96 bits, its
        field in the high 64 (``t_r96`` puts an IP's low half there), and in the low 32 of every lane
        but the group record's, ``stamp``, the call's time."""
        return self.t_g96 ^ t_fp * self.t_r96 | stamp * _STAMPS[self.t_k]

    def _bounded(self, part: str, name: str | None) -> str | None:
        """``name`` escaped; None if unknown, blank or over the bound (noted in ``dropped``)."""
        if name is None or fits(name.strip()):
            return escape(name)
        self.dropped.append(NameTooLong(part, escaped_bytes(name.strip())))
        return None


def _lanes(fingerprints: list[int], width: int = 64, at: int = 0) -> tuple[int, int]:
    """``(g, r)``: the fingerprints in lanes of ``width`` bits, the first in the highest, each ``at`` bits
    up its lane, and a 1 there in each lane."""
    g = r = 0
    for i, f in enumerate(reversed(fingerprints)):
        g |= f << (width * i + at)
        r |= 1 << (width * i + at)
    return g, r


# For a place of k torrent fields: a 1 in the low bit of each of the k lowest 96-bit lanes (where
# ``PlaceInfo.torrent_records`` puts the time).
_STAMPS = [sum(1 << (96 * i) for i in range(k)) for k in range(6)]


def lua_string(s: str) -> bytes:
    """A length-prefixed UTF-8 string as record.lua reads it (``s``: an escaped name).

    Raises ``NameTooLong`` if it is over ``MAX_NAME_BYTES``.
    """
    b = s.encode("utf-8")
    if len(b) > MAX_NAME_BYTES:
        raise NameTooLong("place", len(b))
    return len(b).to_bytes(2, "big") + b
