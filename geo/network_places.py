"""The places of the database networks read: another address of one is not decoded again.

Strategy: a City database answers an address with the record of the
network that holds it (``get_with_prefix_len`` gives that network's prefix
length), and every address of the network has that record. Reading one
costs little in its search tree (~0.2 µs) and much in decoding the record
(~11 µs for a GeoLite2 City record, names in eight languages), while peers
crowd into the networks of a few ISPs. So the place of each network met is
kept by prefix length, then network bits, and an address is first tried
against every prefix length met so far, in the order met (a few dozen
lookups at most; a table a length, keyed by the network's bits as an
integer: no key is built for a lookup, half the time of keys of (length,
bits) over a City database's 21 IPv4 lengths). The answer is exact: it is
the record the database would give.

Memory stays bounded: past ``size`` networks the map starts over. Places
are shared between networks that name the same one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

P = TypeVar("P")


class NetworkPlaces(Generic[P]):
    """Places by database network, for addresses of ``bits`` bits (32 or 128); at most ``size`` networks."""

    __slots__ = ("_bits", "_count", "_shared", "_size", "_tables")

    def __init__(self, bits: int, size: int):
        self._bits, self._size = bits, size
        # per prefix length met, in the order met: (the shift that leaves an address's network bits,
        # network bits -> place); int keys, no tuple made for a lookup
        self._tables: dict[int, tuple[int, dict[int, P]]] = {}
        self._count = 0  # networks kept
        self._shared: dict[P, P] = {}

    def get(self, address: int) -> P | None:
        """The place of the network holding ``address`` (an integer of ``bits`` bits), if one was kept."""
        for shift, places in self._tables.values():
            got = places.get(address >> shift)
            if got is not None:
                return got
        return None

    def put(self, address: int, length: int, place: P) -> P:
        """Keep ``place`` for the network of ``length`` bits holding ``address``; returns the place as
        kept (one object per distinct place)."""
        if not 0 <= length <= self._bits:
            return place
        if self._count >= self._size:
            self._tables.clear()
            self._shared.clear()
            self._count = 0
        place = self._shared.setdefault(place, place)
        table = self._tables.get(length)
        if table is None:
            table = self._tables[length] = (self._bits - length, {})
        shift, places = table
        net = address >> shift
        self._count += net not in places
        places[net] = place
        return place

    def __len__(self) -> int:
        return self._count
