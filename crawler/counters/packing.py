"""A visit's IPs packed, bit by bit, into the binary arguments of probe.lua and record.lua.

Each IP comes met (``met_ips``: its packed form, its place's names, its
fingerprint from ``marks.Fingerprinter``, 128 bits whose high half picks its
mark buckets and low half is XORed into each of its metric fields, and its
``fresh_places`` key), so the loops below do only arithmetic per IP; its
records are built as one integer, turned into bytes once:

- ``visit_part``: probe.lua's ``probes``, per IP a u16 bucket number (of its
  bucket in the torrent's roster, ``marks.roster_width``; 1-based among the
  call's) and the 8-byte field of its probe lane (the group record, or the
  users mark without a country);
- ``add_visit``: record.lua's ``ips``, per IP its header (bucket numbers,
  place number, k) and its metric fields, the lanes of ``places.PlaceInfo``
  (``lanes ^ low64 * r``: one multiply and one XOR per IP); in one shard's
  mixed calls, an IP whose place marks are known fresh as a torrent part,
  and the torrent parts of a torrent believed never counted (``VisitPart.fresh``)
  in blocks, one a roster bucket: their fields are all new, so record.lua
  adds a block's at once instead of reading each IP's record.

The layouts are those of the scripts' headers (``crawler/counters/*.lua``);
the containers the bytes go in are ``calls``'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.marks import roster_width, width_code
from crawler.counters.met_ips import Met
from crawler.counters.places import PlaceInfo
from crawler.counters.script_args import FRESH, LOW64, ProbeCall, RecordBatch, RecordBatches, ShardKeys, VisitPart


def visit_part(shard: ShardKeys, h: str, t_fp: int, ips: Sequence[Met],
               n_buckets: int, place_info: Callable[[tuple], PlaceInfo], split: bool,
               probe_ips: int, base: bytes = bytes(7), legacy: bool = False) -> VisitPart | None:
    """The distinct IPs ``ips`` (each as ``met_ips`` meets it) of a visit of torrent ``h``, in probe.lua
    calls of ``probe_ips`` IPs in ``shard``, the one holding the counters of ``h`` (``t_fp``: its
    fingerprint; ``n_buckets``: the shard's mark buckets).

    Returns the visit's part (None without IPs), with its rows ``(place
    tuple, (PlaceInfo, metric lanes of this visit, its probe lane, whether
    the place has a group record), IP fingerprint, roster bucket, roster
    bucket of its group record, fresh key)`` in its calls' order. The lanes are the whole record's, or with several shards
    (``split``) the torrent part's (``PlaceInfo``); the probe lane (the group
    record, or the users mark without a country) is the same in both. The
    IP's bucket in the torrent's roster holds its marks of the torrent and
    its group record (None for the latter: no group record, the IP has no
    country). ``place_info(place tuple)`` gives a place's ``PlaceInfo``.
    ``probe_ips`` 0: no probe calls (the visit is not probed). ``base``: the
    torrent's width base (``Fingerprinter.width_base``); ``legacy``: its
    marks may also be by (IP, torrent) (``VisitPart``).
    """
    width, roster = roster_width(len(ips)), t_fp % n_buckets  # the torrent's roster
    vplaces: dict = {}  # place tuple -> (info, metric lanes of this visit, its probe lane)
    part = VisitPart(shard, h, t_fp)
    part.b0, part.code, part.base, part.legacy = roster, width_code(width), base, legacy
    part.mask = 1 << part.code
    rows = part.rows
    append = rows.append
    probe = part.probe
    bnumbers, args = probe.bnumbers, probe.args
    n = 0
    for _, pkey, f, fkey in ips:
        vp = vplaces.get(pkey)
        if vp is None:
            info = place_info(pkey)
            if split:
                lanes = info.torrent_lanes(t_fp)
                vp = vplaces[pkey] = (info, lanes, lanes >> (info.t_shift - 64), info.k >= 3)
            else:
                lanes = info.g ^ t_fp * info.tr
                vp = vplaces[pkey] = (info, lanes, lanes >> (info.shift - 64), info.k >= 3)
        # the IP's bucket in the roster: its torrent marks, and its group record when it has a country
        bucket = (roster + (f >> 64) % width) % n_buckets
        rb = bucket if vp[3] else None
        append((pkey, vp, f, bucket, rb, fkey))
        if not probe_ips:
            continue
        if n == probe_ips:
            probe.n = n
            probe = part.probe = ProbeCall()
            part.probes.append(probe)
            bnumbers, args, n = probe.bnumbers, probe.args, 0
        b = bnumbers.setdefault(bucket if rb is None else rb, len(bnumbers) + 1)
        args += ((b << 64) | (vp[2] ^ (f & LOW64))).to_bytes(10, "big")
        n += 1
    probe.n = n
    return part if rows else None


def add_visit(batches: RecordBatches, i: int, part: VisitPart, flags: bytes, n_buckets: int,
              fresh: FreshPlaces | None = None, cutoff: int = 0, now: int = 0) -> None:
    """Add the rows of visit ``i`` (``part``: its torrent's) whose probe flag is not fresh to the
    record.lua calls of ``batches`` (an IP's pairs are never split across calls).

    ``n_buckets``: the mark buckets of a shard, among which an IP's place marks
    are bucketed by the IP alone. In mixed calls (``batches.mixed``), each
    record has its form byte first, and an IP whose place marks ``fresh`` says
    are fresh after ``cutoff`` goes as a torrent part carrying their time
    (``TorrentParts``, or ``TorrentBlocks`` for a ``part.fresh`` visit without
    other widths: ``now`` is the calls' time).

    The call an IP goes in is asked of ``batches`` only when the IP does not
    fit in the one before; the IPs in between are added to it here.
    """
    country_keys, limit = part.shard.country_keys, batches.limit
    mixed = batches.mixed
    # ``FreshPlaces.since`` written out (a call an IP would be most of its cost)
    time_of = fresh.times() if mixed and fresh is not None else None
    batch: RecordBatch | None = None
    wide = part.others or part.legacy
    # most IPs of a first visit whose addresses were met in other swarms are torrent parts
    parts: TorrentParts | TorrentBlocks = (TorrentBlocks(part, now) if part.fresh and mixed and not wide
                                           else TorrentParts(part))
    # the torrent parts gathered for blocks (the visit's first call; None: written as records)
    pend: list | None = None
    for (pkey, (info, lanes, _, grouped), f, bucket, rb, fkey), flag in zip(part.rows, flags):
        if flag == FRESH:
            continue
        # a place with a country: its place marks may be known fresh
        since = time_of(fkey, 0) if time_of is not None and grouped else 0
        if since <= cutoff:
            since = 0
        pairs = info.t_k if since else info.k
        if batch is None or batch.pairs + pairs > limit:
            parts = parts.next_call(batch)
            # a block visit's torrent parts are gathered, then written in one loop (``TorrentBlocks``)
            pend, records = (parts.pending, parts.parts) if isinstance(parts, TorrentBlocks) else (None, parts)
            batch = batches.batch_for(part, i, pairs)
            numbers, heads, ips = batch.bnumbers, batch.heads, batch.ips
            counted = batch.visits[-1]
        else:  # ``RecordBatch.add_ip``
            counted[2] += 1
            batch.pairs += pairs
        if wide:  # its torrent's marks may also be elsewhere (``VisitPart``)
            batch.add_extras(part, f, n_buckets)
        if since:
            if pend is None:
                records.add(batch, pkey, info, f, bucket, rb, since)
            else:
                pend.append((pkey, info, f, bucket, since))
            continue
        head = heads.get(pkey)
        if head is None:
            head = batch.add_place(pkey, info, country_keys)
        # the torrent's marks of this IP: its bucket in the roster
        tb = numbers.setdefault(bucket, len(numbers) + 1)
        # its place marks: bucket by IP alone
        gb = numbers.setdefault((f >> 64) % n_buckets, len(numbers) + 1) if info.k > 1 else 0
        # its group record: in the torrent's roster
        rn = numbers.setdefault(rb, len(numbers) + 1) if grouped else 0
        # in a mixed call, form 0 (a leading zero byte)
        ips += ((rn << info.rshift) | (tb << info.tshift) | (gb << info.gshift) | head
                | (lanes ^ (f & LOW64) * info.r)).to_bytes(info.nbytes + mixed, "big")
        if mixed and grouped:  # the call answers its place marks' time
            batch.learn.append(fkey)
    if batch is not None:
        parts.end(batch)


class TorrentParts:
    """A visit's torrent parts in mixed calls, an IP a record of form 1 (``RecordBatch.torrent_record``,
    and the place time), written out: ``add`` one, ``next_call`` when the visit goes on in another call."""

    __slots__ = ("country_keys", "part", "tlanes", "tparts")

    def __init__(self, part: VisitPart):
        self.part, self.country_keys = part, part.shard.country_keys
        self.tlanes: dict[tuple, int] = {}  # place tuple -> its lanes in this visit
        # place tuple -> what its torrent parts share in the current call: header bits (form 1 included),
        # lanes and shifts
        self.tparts: dict[tuple, tuple] = {}

    def lanes(self, pkey: tuple, info: PlaceInfo) -> int:
        """The lanes of the visit's torrent parts at place ``pkey``."""
        tl = self.tlanes.get(pkey)
        if tl is None:
            tl = self.tlanes[pkey] = info.torrent_lanes(self.part.t_fp)
        return tl

    def add(self, batch: RecordBatch, pkey: tuple, info: PlaceInfo, f: int, bucket: int, rb: int | None,
            since: int) -> None:
        """The torrent part of the IP of fingerprint ``f`` at place ``pkey`` (its roster bucket, its group
        record's, None: none), its place marks fresh since ``since``."""
        tp = self.tparts.get(pkey)
        if tp is None:
            head = batch.torrent_head(pkey, info, self.country_keys) | (1 << 8 * info.t_nbytes)  # form 1
            tp = self.tparts[pkey] = (head, self.lanes(pkey, info), info.t_r, info.t_bshift, info.t_rshift,
                                      info.t_oshift, info.t_nbytes + 1)
        head, tl, t_r, bshift, rshift, oshift, nbytes = tp
        numbers = batch.bnumbers
        rec = ((numbers.setdefault(bucket, len(numbers) + 1) << bshift) | head | (tl ^ (f & LOW64) * t_r)
               | (since << oshift))
        if rb is not None:
            rec |= numbers.setdefault(rb, len(numbers) + 1) << rshift
        batch.ips += rec.to_bytes(nbytes, "big")

    def next_call(self, batch: RecordBatch | None) -> TorrentParts:
        """The parts the visit's IPs go as in the next call (``batch``: the one before, None: none)."""
        self.tparts = {}
        return self

    def end(self, batch: RecordBatch) -> None:
        """The visit's IPs in ``batch`` are all added."""


class TorrentBlocks:
    """The torrent parts of a visit of a torrent believed never counted (``VisitPart.fresh``), in
    blocks (``RecordBatch.add_blocks``), one a roster bucket: in the visit's first call only, a
    call after it finding the torrent counted by that one. ``add_visit`` gathers them in ``pending``
    (place tuple, ``PlaceInfo``, fingerprint, roster bucket, place marks' time), written at the
    call's end in one loop (most IPs of a first visit come this way: a call each would be a third of
    their cost), a group record with the time of the IP's place marks, no later than ``now`` (the
    call's)."""

    __slots__ = ("now", "parts", "pending")

    def __init__(self, part: VisitPart, now: int):
        self.parts, self.now = TorrentParts(part), now
        self.pending: list[tuple] = []

    def next_call(self, batch: RecordBatch | None) -> TorrentParts | TorrentBlocks:
        """Blocks in the first call (``batch`` None); after it, torrent parts."""
        if batch is None:
            return self
        self.end(batch)
        return self.parts.next_call(batch)

    def end(self, batch: RecordBatch) -> None:
        """The visit's IPs in ``batch`` are all added: its blocks go before its records."""
        if not self.pending:
            return
        now, lanes_of, country_keys = self.now, self.parts.lanes, self.parts.country_keys
        # mark bucket -> (IPs per place number, group records, torrent fields)
        blocks: dict[int, tuple[dict[int, int], bytearray, bytearray]] = {}
        # place tuple -> its number in the call, lanes, multiplier, shift, mask and bytes of its fields
        places: dict[tuple, tuple] = {}
        for pkey, info, f, bucket, since in self.pending:
            bp = places.get(pkey)
            if bp is None:
                fbits = 64 * info.t_k
                bp = places[pkey] = (batch.place_number(pkey, info, country_keys), lanes_of(pkey, info), info.t_r,
                                     fbits, (1 << fbits) - 1, info.t_k * 8)
            n, tl, t_r, fbits, fmask, fbytes = bp
            block = blocks.get(bucket)
            if block is None:
                block = blocks[bucket] = ({}, bytearray(), bytearray())
            at, groups, fields = block
            at[n] = at.get(n, 0) + 1
            v = tl ^ (f & LOW64) * t_r  # the group record's field, then the torrent's
            groups += ((v >> fbits) << 32 | (since if since < now else now)).to_bytes(12, "big")
            fields += (v & fmask).to_bytes(fbytes, "big")
        self.pending = []
        batch.add_blocks(blocks)
