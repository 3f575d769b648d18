"""The IPs a process has met, each parsed, located and fingerprinted once.

Strategy. A peer is in several swarms and is met again on every revisit.
Parsing its text, reading the GeoIP database and hashing it with the secret
are the recording's costliest steps per IP, and their answers do not change
while the process runs. So each IP text is turned once into what the
recording's loops take (``Met``: its packed form, its place's names, its
128-bit fingerprint from ``marks.Fingerprinter`` and its ``fresh_places``
key) and kept, at most ``marks.IP_MEMO`` texts, after which the memory
starts over. A text that is no IP is kept as None; an IP whose place could
not be read (a GeoIP read error, which the locator tallies) is not kept, so
it is read, and tallied, again the next time.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from operator import itemgetter
from typing import Final

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.ip_forms import canonical_ip
from crawler.counters.marks import IP_MEMO, Fingerprinter
from geo.locator import Place

# An IP as the recording meets it: (packed, (country, city, postcode), fingerprint, fresh key).
Met = tuple[bytes, tuple, int, int]


def met(packed: bytes, place: Place, fingerprints: Fingerprinter) -> Met:
    """``packed`` at ``place`` as the recording meets it, its fingerprint from
    ``Fingerprinter.known`` when the process has it."""
    known = fingerprints.known
    f = known.get(packed)
    if f is None:
        if len(known) > IP_MEMO:
            known.clear()
        f = known[packed] = fingerprints.ip(packed)
    pkey = (place.country, place.city, place.postcode)
    return packed, pkey, f, FreshPlaces.key(f, fingerprints.where(pkey))


class MetIPs:
    """The IPs one process has met (module note). ``locator``: a ``geo.Locator``;
    ``fingerprints``: the recorder's ``Fingerprinter``."""

    def __init__(self, locator, fingerprints: Fingerprinter):
        self.locator, self.fingerprints = locator, fingerprints
        self.texts: dict[str, Met | None] = {}  # IP text -> Met, or None for text that is no IP

    def visit(self, ips: Iterable[str]) -> list[Met]:
        """One visit's IP texts as met, each distinct IP once (in the order given); text that is
        no IP left out."""
        texts = self.texts
        if len(texts) > IP_MEMO:
            texts.clear()
        # Most often every IP was met before, each text its own IP: looked up in C loops alone.
        distinct = ips if isinstance(ips, (set, frozenset)) else dict.fromkeys(ips)
        known: list = list(map(texts.get, distinct))  # of Met, once None is found not in it
        if None not in known and len(set(map(_PACKED, known))) == len(known):
            return known
        locator, fps = self.locator, self.fingerprints
        out: list[Met] = []
        seen: set[bytes] = set()
        for ip in ips:
            got = texts.get(ip, _UNSEEN)
            if got is _UNSEEN:
                canonical = canonical_ip(ip)
                errors = locator.read_errors
                got = None if canonical is None else met(canonical[0], locator.locate(canonical[1]), fps)
                if locator.read_errors == errors:  # a failed read is tried (and tallied) again
                    texts[ip] = got
            if got is None or got[0] in seen:
                continue
            seen.add(got[0])
            out.append(got)
        return out

    def located(self, located: Iterable[tuple[bytes, Place]]) -> list[Met]:
        """``(packed_ip, Place)`` pairs as met, an IP given twice kept once, at its first place."""
        out: list[Met] = []
        seen: set[bytes] = set()
        fps = self.fingerprints
        for packed, place in located:
            if packed not in seen:
                seen.add(packed)
                out.append(met(packed, place, fps))
        return out


class _Unseen(Enum):
    UNSEEN = 0


_PACKED = itemgetter(0)
# A text not met yet (an Enum member: a type checker narrows ``is`` on it).
_UNSEEN: Final = _Unseen.UNSEEN
