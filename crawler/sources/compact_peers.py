"""A tracker's peers kept packed, their texts made when asked.

A UDP tracker's reply lists its peers as packed (address, port) entries
(BEP 15, BEP 23, BEP 7), and what a visit does with them needs the
addresses packed: the recorder fingerprints and keys packed IPs, and a
revisit that its swarm record settles does nothing else with them. Making
each address's text and parsing it back was, per visit, the largest cost
of the announce path. ``CompactPeers`` is a set of ``(ip text, port)``
pairs, as every source's peers are (``SourceResult.peers``), that keeps the
packed pairs and makes the texts only for whoever iterates it (a metadata
fetch, a comparison with a source that gave texts); ``ips`` gives the
distinct packed IPs straight from the entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Set
from operator import itemgetter

from crawler.counters.ip_forms import PackedIPs, ip_text

_IP = itemgetter(0)


class CompactPeers(Set):
    """Distinct ``(packed ip, port)`` pairs (``pairs``: IPv4 as 4 bytes, IPv4-mapped IPv6 as its IPv4,
    IPv6 as 16) seen as the set of their ``(ip text, port)`` pairs."""

    __slots__ = ("pairs", "_texts")

    def __init__(self, pairs: Iterable[tuple[bytes, int]]):
        self.pairs: frozenset[tuple[bytes, int]] = frozenset(pairs)
        self._texts: frozenset[tuple[str, int]] | None = None

    def ips(self) -> PackedIPs:
        """The distinct packed IPs of the peers."""
        return PackedIPs(map(_IP, self.pairs))

    def texts(self) -> frozenset[tuple[str, int]]:
        """The peers as ``(canonical ip text, port)`` pairs, made once."""
        if self._texts is None:
            self._texts = frozenset((ip_text(ip), port) for ip, port in self.pairs)
        return self._texts

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.texts())

    def __contains__(self, peer: object) -> bool:
        return peer in self.texts()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CompactPeers):  # two trackers' lists: compared packed (tracker_mirrors)
            return self.pairs == other.pairs
        return Set.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self.texts())

    def __repr__(self) -> str:
        return f"CompactPeers({set(self.texts())!r})"

    @classmethod
    def _from_iterable(cls, it: Iterable) -> frozenset:
        # What the set operators (|, &, -) give: a frozenset of the text pairs.
        return frozenset(it)
