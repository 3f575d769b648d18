"""Dedupe marks: keyed fingerprints of (metric, IP) packed into bucket strings.

Strategy (measured on Redis 7.0, see docs/metrics.md): a key per mark costs
~97 B even for an 8-byte fingerprint (per-key and per-expiry overhead); a
field of a small listpack hash ~15-18 B, but each lookup scans the listpack
(~2.5 µs per field at 100 fields). So a mark is one 12-byte record of one of
``buckets`` strings ``mk:<n>``: ~13 B per mark, and a lookup is one memmem
over ~1.2 KB inside Redis.

- keyed fingerprints (``Fingerprinter``): an IP's place marks live in the
  bucket of the IP alone, so a peer in thousands of swarms does not grow one
  bucket; the record's first 8 bytes are 64 bits of the IP's fingerprint XOR
  the metric's. The address itself is never stored.
- the torrent's *roster*: ``roster_width(ips)`` consecutive buckets from the
  torrent's own (``torrent(h) mod buckets``), ~16 IPs of the visit each, the
  IP picking one. There live the IP's marks of the torrent and its group
  record for (torrent, place) (see record.lua), which says whether anything
  of the IP can count; so a revisit's probe reads a few buckets rather than
  one per IP, and a first visit writes a few rather than one per IP (a
  first visit's scripts took 0.7 of the time they took with a bucket per
  (IP, torrent)). A swarm whose size crosses a width moves its roster:
  - the torrent's marks stay where they were made: each width (a code 0-6)
    has a record in the roster's first bucket, the time of the last mark
    made at it (``width_base``, marks.lua's ``live_widths``), the probe
    answers the codes whose record is fresh and record.lua looks at each;
  - a group record is a shortcut, never the truth: one not found sends the
    IP to record.lua, which checks its marks, counts nothing already counted
    and writes the group record where the probe now looks.
  A crawl whose layout does not say ``rosters`` may hold marks of the
  window by (IP, torrent) (``(high64(ip) XOR torrent(h)) mod buckets``),
  where every crawl kept them before rosters: record.lua looks there too.
- the record's last 4 bytes are the unix second the mark was made (big
  endian). A mark counts as present while ``time > now - window``:
  correctness never depends on deleting stale records. ``sweep.lua`` removes
  them in bounded steps to give the memory back.

Size ``buckets`` so that buckets stay around 100 records (~1.2 KB): the
default 2**18 buckets suit ~25 million live marks. Beyond that buckets grow
longer: lookups stay correct, but a script copies every bucket it changes
whole, so a visit's Redis time grows with them (a first visit's scripts took
4 times as long at ~2,000 records a bucket, 9 times at ~9,000). A crawl records its count
(``PEERCRAWL_MARK_BUCKETS``, ``crawler.store.layout``): changing it would
remap every mark (IPs would count again within the window).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from crawler.shard_layout import DEFAULT_MARK_BUCKETS

# A torrent's roster (module note): ~ROSTER_IPS IPs of the torrent to a bucket, in widths that grow
# 4x at a time (a swarm's size moves the roster only when it crosses one), at most ROSTER_MAX buckets.
ROSTER_IPS = 16
ROSTER_MAX = 4096
# IPs a process keeps (the recorder's parsed, located and fingerprinted forms by text, ``met_ips``;
# ``Fingerprinter.known`` for IPs handed in packed): a peer met again, in another swarm or on a
# revisit, is not parsed, located or hashed again. The recorder's memo takes ~290 B an IP
# (measured), ~38 MB when full; past it each starts over (the recorder's keeps nothing for a
# while when it was seldom found: ``met_ips``).
IP_MEMO = 1 << 17
# Places whose ``Fingerprinter.where`` a process keeps (the world has ~100,000 cities).
WHERE_MEMO = 200_000


class Fingerprinter:
    """Keyed 64-bit fingerprints of IPs, torrents and place metrics.

    A mark's field is ``low64(ip) XOR metric``, its bucket ``(high64(ip)
    XOR torrent(h)) mod buckets`` for a torrent's metric and ``high64(ip)
    mod buckets`` for a place metric. The metric part is composed so that Python hashes
    once per IP, once per torrent per visit and once per place per process:

    - ``torrents.<h>.users``: ``torrent(h)``;
    - a global place metric (``countries.C.users``, ``countries.C.cities.Y.users``,
      ...): ``place(name)``;
    - a torrent's place metric (``torrents.<h>.countries.C...``):
      ``torrent(h) XOR place("t" + name without the torrent)``.

    Every part is a BLAKE2b digest keyed with the secret (distinct
    personalisations), so two different (metric, IP) pairs of one bucket
    share a field only by a 2**-64 accident, and without the secret a field
    cannot be tested against a guessed address.
    """

    def __init__(self, secret: bytes, buckets: int = DEFAULT_MARK_BUCKETS):
        if buckets < 1:
            raise ValueError("buckets must be at least 1")
        self.buckets = buckets
        self._ip = hashlib.blake2b(key=secret, digest_size=16, person=b"peercrawl-ip")
        self._torrent = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-t")
        self._place = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-place")
        self._where = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-where")
        self._swarm = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-swarm")
        self._swarm_ips = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-swip")
        self._wide = hashlib.blake2b(key=secret, digest_size=7, person=b"peercrawl-wide")
        # packed IP -> ``ip(packed)``, for loops that inline ``ip`` (at most IP_MEMO entries)
        self.known: dict[bytes, int] = {}
        self._wheres: dict[tuple, int] = {}  # place tuple -> ``where(place)``

    def ip(self, packed_ip: bytes) -> int:
        """128-bit keyed fingerprint of one packed IP (high half: bucket, low half: field)."""
        h = self._ip.copy()
        h.update(packed_ip)
        return int.from_bytes(h.digest(), "big")

    def ip_hasher(self):
        """The keyed BLAKE2b state ``ip`` copies: ``copy()``, ``update(packed_ip)``, ``digest()``
        (for loops that inline ``ip``)."""
        return self._ip

    def torrent(self, info_hash: str) -> int:
        """64-bit keyed fingerprint of a lower-case hex info-hash."""
        h = self._torrent.copy()
        h.update(info_hash.encode())
        return int.from_bytes(h.digest(), "big")

    def width_base(self, t_fp: int) -> bytes:
        """The 7 bytes that, with a width's code, make the field of the record of a torrent's width
        in its roster's first bucket (module note); ``t_fp``: the torrent's fingerprint."""
        h = self._wide.copy()
        h.update(t_fp.to_bytes(8, "big"))
        return h.digest()

    def place(self, name: str) -> int:
        """64-bit keyed fingerprint of a place metric's name (escaped parts, no torrent)."""
        h = self._place.copy()
        h.update(name.encode("utf-8"))
        return int.from_bytes(h.digest(), "big")

    def where(self, pkey: tuple) -> int:
        """64-bit keyed fingerprint of a place, its tuple of names (country, city, postcode; None:
        unknown), the same in every process (kept per place: at most ``WHERE_MEMO``)."""
        w = self._wheres.get(pkey)
        if w is None:
            if len(self._wheres) > WHERE_MEMO:
                self._wheres.clear()
            h = self._where.copy()
            for part in pkey:
                if part is None:
                    h.update(b"\xff")
                else:
                    b = part.encode("utf-8", "surrogatepass")
                    h.update(len(b).to_bytes(4, "big") + b)
            w = self._wheres[pkey] = int.from_bytes(h.digest(), "big")
        return w

    def swarm(self, t_fp: int, total: int, n: int) -> bytes:
        """The 8-byte keyed fingerprint of a torrent's swarm (``swarm_record``): ``t_fp`` the
        torrent's fingerprint, ``total`` the sum of its ``n`` IPs' (IP, place) keys modulo 2**128."""
        h = self._swarm.copy()
        h.update(t_fp.to_bytes(8, "big") + total.to_bytes(16, "big") + n.to_bytes(4, "big"))
        return h.digest()

    def swarm_ips(self, t_fp: int, packed: Collection[bytes], identity: bytes) -> bytes:
        """The 8-byte keyed fingerprint of a torrent's swarm by its distinct packed IPs alone, each placed by
        the locator of ``identity`` (``swarm_record.swarm_of_ips``). IPv4 addresses are joined as they are
        (each 4 bytes); a list with an IPv6 one gives each address its length first, so no two lists
        join alike."""
        ordered = sorted(packed)
        joined = b"".join(ordered)
        form = b"4"
        if len(joined) != 4 * len(ordered):
            joined, form = b"".join(len(p).to_bytes(1, "big") + p for p in ordered), b"*"
        h = self._swarm_ips.copy()
        h.update(t_fp.to_bytes(8, "big") + len(ordered).to_bytes(4, "big") + len(identity).to_bytes(2, "big")
                 + identity + form + joined)
        return h.digest()



RECORD = 12  # bytes per mark: 8-byte field, u32 unix second


def mark_time(now: float) -> int:
    """``now`` as a mark's time (unix seconds, 32 bits); raises ``ValueError`` when it does not fit, for
    callers to check before anything is sent."""
    if not 0 <= int(now) < 1 << 32:
        raise ValueError(f"time {now!r} does not fit a mark (unix seconds, 32 bits)")
    return int(now)


def parse_bucket(raw: bytes) -> list[tuple[bytes, int]]:
    """The ``(field, unix second)`` records of one mark bucket's value."""
    if len(raw) % RECORD:
        raise ValueError(f"mark bucket of {len(raw)} bytes is not a whole number of {RECORD}-byte records")
    return [(raw[i : i + 8], int.from_bytes(raw[i + 8 : i + RECORD], "big")) for i in range(0, len(raw), RECORD)]


def width_code(width: int) -> int:
    """A roster width's code (4^code buckets): what records of widths and masks of them hold."""
    return (width.bit_length() - 1) >> 1


def roster_width(ips: int) -> int:
    """How many buckets a torrent's roster spreads over for a visit of ``ips`` IPs (module note):
    the least power of 4 giving at most ``ROSTER_IPS`` IPs a bucket, at most ``ROSTER_MAX``."""
    width = 1
    while width * ROSTER_IPS < ips and width < ROSTER_MAX:
        width *= 4
    return width
