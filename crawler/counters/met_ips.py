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

A crawl of millions of addresses fills the memory in seconds, long before
a peer's other swarms come up: nearly every meet misses, and keeping what
it made costs more than the rare hit saves (a shuffled world of 400,000
addresses: 8.5 % of meets hit, a meet 1.2x the CPU of keeping nothing).
So a fill whose meets found the memory less than ``MIN_HITS`` of the time
leaves the next ``SKIP_FILLS`` fills' worth of meets unkept, then the
memory is tried again (that world: 0.75-0.82x the CPU a meet of keeping
every fill). A world that fits never fills it and keeps all.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.ip_forms import PackedIPs, canonical_ip
from crawler.counters.marks import IP_MEMO, Fingerprinter
from geo.locator import Place

# The share of a fill's meets that must find the memory for it to go on keeping them, and how many
# fills' worth of meets go unkept after one that did not (module note).
MIN_HITS = 0.25
SKIP_FILLS = 4
# An IP as the recording meets it: (packed, (country, city, postcode), fingerprint, fresh key).
Met = tuple[bytes, tuple, int, int]


def met(packed: bytes, place: Place, f: int, fingerprints: Fingerprinter) -> Met:
    """``packed`` at ``place`` as the recording meets it, ``f`` its ``Fingerprinter.ip``."""
    pkey = (place.country, place.city, place.postcode)
    return packed, pkey, f, FreshPlaces.key(f, fingerprints.where(pkey))


class MetIPs:
    """The IPs one process has met (module note). ``locator``: a ``geo.Locator``;
    ``fingerprints``: the recorder's ``Fingerprinter``; ``memo``: texts kept at most."""

    def __init__(self, locator, fingerprints: Fingerprinter, memo: int = IP_MEMO):
        self.locator, self.fingerprints, self.memo = locator, fingerprints, memo
        self.texts: dict[str | bytes, Met | None] = {}  # IP text (or packed) -> Met; None: text that is no IP
        self.hits = self.misses = 0  # meets of the current fill that found the memory, and not
        self.unkept = 0  # meets still to leave unkept after a fill that seldom found the memory

    def visit(self, ips: Iterable[str] | PackedIPs) -> list[Met]:
        """One visit's IP texts (or ``PackedIPs``) as met, each distinct IP once (in the order
        given); text that is no IP left out. Kept by the form given: a packed IP and its text
        never meet as one key, and a process meets one form from each source."""
        texts = self.texts
        if len(texts) > self.memo:
            self._filled()
        # Looked up in C loops: most often every IP was met before, each text its own IP; the
        # Python loop runs only over the texts not met yet.
        distinct = ips if isinstance(ips, (set, frozenset)) else dict.fromkeys(ips)
        got: list = list(map(texts.get, distinct))
        misses = 0
        if None in got:  # a text not met yet, or one that is no IP
            for i, (ip, m) in enumerate(zip(distinct, got)):
                if m is None and ip not in texts:
                    got[i] = self._meet(ip)
                    misses += 1
            got = [m for m in got if m is not None]
        self.hits += len(distinct) - misses
        self.misses += misses
        # one IP in two spellings: its first kept (packed IPs have one form each)
        if not isinstance(ips, PackedIPs) and len(set(map(_PACKED, got))) < len(got):
            first: dict[bytes, Met] = {}
            for m in got:
                first.setdefault(m[0], m)
            got = list(first.values())
        return got

    def _meet(self, ip: str | bytes) -> Met | None:
        """``ip`` parsed (unless packed), located and fingerprinted, kept unless its place could not
        be read (None: no IP)."""
        locator, fps = self.locator, self.fingerprints
        errors = locator.read_errors
        if isinstance(ip, bytes):  # packed: its text is made only if the locator needs it
            m = met(ip, locator.locate_packed(ip), fps.ip(ip), fps)
        elif (canonical := canonical_ip(ip)) is None:
            m = None
        else:
            packed = canonical[0]
            m = met(packed, locator.locate_parsed(packed, canonical[1]), fps.ip(packed), fps)
        if self.unkept:  # the memory seldom answered lately (module note)
            self.unkept -= 1
            if not self.unkept:  # kept again: the next fill is measured from here
                self.hits = self.misses = 0
        elif locator.read_errors == errors:  # a failed read is tried (and tallied) again
            self.texts[ip] = m
        return m

    def _filled(self) -> None:
        """The memory is full: it starts over, and if its meets seldom found it, the next meets go
        unkept for a while (module note)."""
        if self.hits < MIN_HITS * (self.hits + self.misses):
            self.unkept = SKIP_FILLS * self.memo
        self.texts.clear()
        self.hits = self.misses = 0

    def located(self, located: Iterable[tuple[bytes, Place]]) -> list[Met]:
        """``(packed_ip, Place)`` pairs as met, an IP given twice kept once, at its first place; each
        IP's fingerprint from ``Fingerprinter.known`` when the process has it."""
        out: list[Met] = []
        seen: set[bytes] = set()
        fps = self.fingerprints
        known = fps.known
        for packed, place in located:
            if packed not in seen:
                seen.add(packed)
                f = known.get(packed)
                if f is None:
                    if len(known) > IP_MEMO:
                        known.clear()
                    f = known[packed] = fps.ip(packed)
                out.append(met(packed, place, f, fps))
        return out


_PACKED = itemgetter(0)  # a Met's packed IP
