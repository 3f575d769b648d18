"""The places of the database networks read: another address of one is not decoded again.

Strategy: a City database answers an address with the record of the
network that holds it (``get_with_prefix_len`` gives that network's prefix
length), and every address of the network has that record. Reading one
costs little in its search tree (~0.2 µs) and much in decoding the record
(~30 µs for a GeoLite2 City record, names in eight languages), while peers
crowd into the networks of a few ISPs. So the place of each network met is
kept by (prefix length, network bits), and an address is first tried
against every prefix length met so far (a few dozen lookups at most: one
dict per family, IPv4 keyed by its 32 bits and IPv6 by its 128). The answer
is exact: it is the record the database would give.

Memory stays bounded: past ``size`` networks the map starts over. Places
are shared between networks that name the same one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

P = TypeVar("P")


class NetworkPlaces(Generic[P]):
    """Places by database network, for addresses of ``bits`` bits (32 or 128); at most ``size`` networks."""

    __slots__ = ("_bits", "_lengths", "_places", "_shared", "_size")

    def __init__(self, bits: int, size: int):
        self._bits, self._size = bits, size
        self._places: dict[tuple[int, int], P] = {}
        self._lengths: list[int] = []  # the prefix lengths met, in the order met
        self._shared: dict[P, P] = {}

    def get(self, address: int) -> P | None:
        """The place of the network holding ``address`` (an integer of ``bits`` bits), if one was kept."""
        places, bits = self._places, self._bits
        for length in self._lengths:
            got = places.get((length, address >> (bits - length)))
            if got is not None:
                return got
        return None

    def put(self, address: int, length: int, place: P) -> P:
        """Keep ``place`` for the network of ``length`` bits holding ``address``; returns the place as
        kept (one object per distinct place)."""
        if not 0 <= length <= self._bits:
            return place
        if len(self._places) >= self._size:
            self._places.clear()
            self._shared.clear()
        place = self._shared.setdefault(place, place)
        self._places[(length, address >> (self._bits - length))] = place
        if length not in self._lengths:
            self._lengths.append(length)
        return place

    def __len__(self) -> int:
        return len(self._places)
