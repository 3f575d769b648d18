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
  adds a block's at once instead of reading each IP's record. Such a visit is
  unprobed, so its first call is packed straight from its met IPs in one loop
  (``first_call``), the rows of the other loops never made.

The layouts are those of the scripts' headers (``crawler/counters/*.lua``);
the containers the bytes go in are ``calls``'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.marks import roster_width, width_code
from crawler.counters.met_ips import Met
from crawler.counters.places import PlaceInfo
from crawler.counters.script_args import FRESH, LOW64, ProbeCall, RecordBatch, RecordBatches, VisitPart
from crawler.counters.shard_keys import ShardKeys


def visit_part(shard: ShardKeys, h: str, t_fp: int, ips: Sequence[Met],
               n_buckets: int, place_info: Callable[[tuple], PlaceInfo], split: bool,
               probe_ips: int, base: bytes = bytes(7), legacy: bool = False) -> VisitPart | None:
    """The distinct IPs ``ips`` (each as ``met_ips`` meets it) of a visit of torrent ``h``, in probe.lua
    calls of ``probe_ips`` IPs in ``shard``, the one holding the counters of ``h`` (``t_fp``: its
    fingerprint; ``n_buckets``: the shard's mark buckets).

    Returns the visit's part (None without IPs), with its rows (``rows_of``)
    in its calls' order; an unprobed visit of one shard's crawl without
    legacy marks keeps its IPs as met instead, its rows made only if a call
    needs them (``add_visit`` packs its first call from the met IPs). The
    lanes are the whole record's, or with several shards (``split``) the
    torrent part's (``PlaceInfo``); the probe lane (the group record, or the
    users mark without a country) is the same in both. ``place_info(place
    tuple)`` gives a place's ``PlaceInfo``. ``probe_ips`` 0: no probe calls
    (the visit is not probed). ``base``: the torrent's width base
    (``Fingerprinter.width_base``); ``legacy``: its marks may also be by (IP,
    torrent) (``VisitPart``).
    """
    if not ips:
        return None
    width = roster_width(len(ips))
    part = VisitPart(shard, h, t_fp)
    part.b0, part.code, part.base, part.legacy = t_fp % n_buckets, width_code(width), base, legacy
    part.mask = 1 << part.code
    part.width, part.count, part.met, part.place_info = width, len(ips), ips, place_info
    if not probe_ips and not split and not legacy:
        return part
    rows = rows_of(part, n_buckets, split)
    if not probe_ips:
        return part
    probe = part.probe
    bnumbers, args = probe.bnumbers, probe.args
    n = 0
    for _, vp, f, bucket, rb, _ in rows:
        if n == probe_ips:
            probe.n = n
            probe = part.probe = ProbeCall()
            part.probes.append(probe)
            bnumbers, args, n = probe.bnumbers, probe.args, 0
        b = bnumbers.setdefault(bucket if rb is None else rb, len(bnumbers) + 1)
        args += ((b << 64) | (vp[2] ^ (f & LOW64))).to_bytes(10, "big")
        n += 1
    probe.n = n
    return part


def rows_of(part: VisitPart, n_buckets: int, split: bool = False) -> list:
    """``part``'s rows, made from its met IPs unless made before: per IP ``(place tuple, (PlaceInfo,
    metric lanes of this visit, its probe lane, whether the place has a group record), IP
    fingerprint, roster bucket, roster bucket of its group record, fresh key)``.

    The IP's bucket in the torrent's roster holds its marks of the torrent and its group record (None
    for the latter: no group record, the IP has no country). ``split``: the lanes are the torrent
    part's (``visit_part``).
    """
    ips = part.met
    if ips is None:
        return part.rows
    part.met = None
    t_fp, place_info, roster, width = part.t_fp, part.place_info, part.b0, part.width
    assert place_info is not None  # ``visit_part`` gives it with the met IPs
    vplaces: dict = {}  # place tuple -> (info, metric lanes of this visit, its probe lane, grouped)
    rows = part.rows = []
    append = rows.append
    for _, pkey, f, fkey in ips:
        vp = vplaces.get(pkey)
        if vp is None:
            info = place_info(pkey)
            lanes, shift = (info.torrent_lanes(t_fp), info.t_shift) if split else (info.lanes(t_fp), info.shift)
            vp = vplaces[pkey] = (info, lanes, lanes >> (shift - 64), info.k >= 3)
        # the IP's bucket in the roster: its torrent marks, and its group record when it has a country
        bucket = (roster + (f >> 64) % width) % n_buckets
        append((pkey, vp, f, bucket, bucket if vp[3] else None, fkey))
    return rows


def add_visit(batches: RecordBatches, i: int, part: VisitPart, flags: bytes, n_buckets: int,
              fresh: FreshPlaces | None = None, cutoff: int = 0, now: int = 0) -> None:
    """Add the IPs of visit ``i`` (``part``: its torrent's) whose probe flag is not fresh to the
    record.lua calls of ``batches`` (an IP's pairs are never split across calls).

    ``n_buckets``: the mark buckets of a shard, among which an IP's place marks
    are bucketed by the IP alone. In mixed calls (``batches.mixed``), each
    record has its form byte first, and an IP whose place marks ``fresh`` says
    are fresh after ``cutoff`` goes as a torrent part carrying their time
    (``TorrentParts``; in blocks in the first call of a ``part.fresh`` visit
    without other widths, ``first_call``: ``now`` is the calls' time).

    The call an IP goes in is asked of ``batches`` only when the IP does not
    fit in the one before; the IPs in between are added to it here.
    """
    mixed = batches.mixed
    # ``FreshPlaces.since`` written out (a call an IP would be most of its cost)
    time_of = fresh.times() if mixed and fresh is not None else None
    wide = part.others or part.legacy
    start = 0
    # most IPs of a first visit whose addresses were met in other swarms are torrent parts
    if part.fresh and part.met is not None and time_of is not None and not wide and FRESH not in flags:
        start = first_call(batches, i, part, n_buckets, time_of, cutoff, now)
        if start == part.count:
            return
    country_keys, limit = part.shard.country_keys, batches.limit
    rows = rows_of(part, n_buckets)
    parts = TorrentParts(part)
    batch: RecordBatch | None = None
    for (pkey, (info, lanes, _, grouped), f, bucket, rb, fkey), flag in zip(
            rows[start:] if start else rows, flags[start:] if start else flags):
        if flag == FRESH:
            continue
        # a place with a country: its place marks may be known fresh
        since = time_of(fkey, 0) if time_of is not None and grouped else 0
        if since <= cutoff:
            since = 0
        pairs = info.t_k if since else info.k
        if batch is None or batch.pairs + pairs > limit:
            parts.new_call()
            batch = batches.batch_for(part, i, pairs)
            counted = batch.visits[-1]
        else:  # ``RecordBatch.add_ip``
            counted[2] += 1
            batch.pairs += pairs
        if wide:  # its torrent's marks may also be elsewhere (``VisitPart``)
            batch.add_extras(part, f, n_buckets)
        if since:
            parts.add(batch, pkey, info, f, bucket, rb, since)
        else:
            whole_record(batch, pkey, info, lanes, f, bucket, grouped, fkey, n_buckets, country_keys)


def whole_record(batch: RecordBatch, pkey: tuple, info: PlaceInfo, lanes: int, f: int, bucket: int, grouped: bool,
                 fkey: int, n_buckets: int, country_keys: Callable[[str, str], list]) -> None:
    """The whole record of the IP of fingerprint ``f`` at place ``pkey`` into ``batch``: its header
    (bucket numbers, place number, k) and metric fields (``lanes ^ low64 * r``). ``bucket``: its
    bucket in the torrent's roster, which holds its group record too when ``grouped``; its place marks
    are bucketed by the IP alone; ``fkey``: its ``fresh_places`` key, whose time a mixed call
    answers."""
    numbers = batch.bnumbers
    head = batch.heads.get(pkey)
    if head is None:
        head = batch.add_place(pkey, info, country_keys)
    # the torrent's marks of this IP (and its group record): its bucket in the roster
    tb = numbers.setdefault(bucket, len(numbers) + 1)
    # its place marks: bucket by IP alone
    gb = numbers.setdefault((f >> 64) % n_buckets, len(numbers) + 1) if info.k > 1 else 0
    mixed = batch.mixed
    # in a mixed call, form 0 (a leading zero byte)
    batch.ips += (((tb if grouped else 0) << info.rshift) | (tb << info.tshift) | (gb << info.gshift) | head
                  | (lanes ^ (f & LOW64) * info.r)).to_bytes(info.nbytes + mixed, "big")
    if mixed and grouped:  # the call answers its place marks' time
        batch.learn.append(fkey)


def first_call(batches: RecordBatches, i: int, part: VisitPart, n_buckets: int, time_of: Callable[[int, int], int],
               cutoff: int, now: int) -> int:
    """The IPs of visit ``i`` that its first call takes, packed from ``part``'s met IPs in one loop:
    ``part`` is a visit of a torrent believed never counted (``VisitPart.fresh``), unprobed, of one
    shard's crawl, without other widths. Returns how many it took (``add_visit`` packs the rest).

    An IP whose place marks are fresh after ``cutoff`` (``time_of``, ``FreshPlaces.times``) goes
    into a block of torrent parts, one a roster bucket (``RecordBatch.add_blocks``), its group record
    carrying the time of its place marks, no later than ``now`` (the call's), its torrent marks made
    whole here, each stamped ``now`` (``PlaceInfo.torrent_records``); the others as whole
    records. A call after the first finds the torrent counted by that one, so it has no blocks.
    """
    country_keys, limit, t_fp, place_info = part.shard.country_keys, batches.limit, part.t_fp, part.place_info
    assert part.met is not None and place_info is not None  # an unprobed visit's (``visit_part``)
    roster, width = part.b0, part.width
    # place tuple -> its PlaceInfo, whole record lanes, grouped, its torrent parts' records (stamped with
    # ``now``), multiplier, shift, mask and bytes, its position in ``places``, and an IP's pairs as a whole
    # record and as a torrent part
    vplaces: dict[tuple, tuple] = {}
    places: list[tuple] = []  # the visit's places, in the order met
    # mark bucket -> (IPs per place position, group records, torrent marks as records)
    blocks: dict[int, tuple[dict[int, int], bytearray, bytearray]] = {}
    batch: RecordBatch | None = None
    taken = 0
    for _, pkey, f, fkey in part.met:
        vp = vplaces.get(pkey)
        if vp is None:
            info = place_info(pkey)
            vp = vplaces[pkey] = (info, info.lanes(t_fp), info.k >= 3, info.torrent_records(t_fp, now), info.t_r96,
                                  info.t_rbits, info.t_rmask, info.t_rbytes, len(places), info.k, info.t_k)
            places.append(pkey)
        info, lanes, grouped, tl, t_r, fbits, fmask, fbytes, at_place, k, t_k = vp
        since = time_of(fkey, 0) if grouped else 0
        if since <= cutoff:
            since = 0
        pairs = t_k if since else k
        if batch is None:
            batch = batches.batch_for(part, i, pairs)
            counted, used = batch.visits[-1], batch.pairs
        elif used + pairs > limit:
            break
        else:  # ``RecordBatch.add_ip``, the batch's count and the visit's written once the loop ends
            used += pairs
        taken += 1
        # the IP's bucket in the roster: its torrent marks, and its group record when it has a country
        bucket = (roster + (f >> 64) % width) % n_buckets
        if not since:
            whole_record(batch, pkey, info, lanes, f, bucket, grouped, fkey, n_buckets, country_keys)
            continue
        block = blocks.get(bucket)
        if block is None:
            block = blocks[bucket] = ({}, bytearray(), bytearray())
        at, groups, fields = block
        at[at_place] = at.get(at_place, 0) + 1
        v = tl ^ (f & LOW64) * t_r  # the group record's field, then the torrent's records
        groups += (v >> fbits | (since if since < now else now)).to_bytes(12, "big")
        fields += (v & fmask).to_bytes(fbytes, "big")
    if batch is None:
        return taken
    batch.pairs = used
    counted[2] += taken - 1
    if blocks:  # the blocks go before the visit's records, their places numbered in the call
        numbers = {j: batch.place_number(places[j], vplaces[places[j]][0], country_keys)
                   for j in sorted({j for at, _, _ in blocks.values() for j in at})}
        batch.add_blocks({bucket: ({numbers[j]: n for j, n in at.items()}, groups, fields)
                          for bucket, (at, groups, fields) in blocks.items()})
    return taken


class TorrentParts:
    """A visit's torrent parts in mixed calls, an IP a record of form 1 (``RecordBatch.torrent_record``,
    and the place time), written out: ``add`` one, ``new_call`` when the visit goes on in another call."""

    __slots__ = ("country_keys", "part", "tparts")

    def __init__(self, part: VisitPart):
        self.part, self.country_keys = part, part.shard.country_keys
        # place tuple -> what its torrent parts share in the current call: header bits (form 1 included),
        # lanes and shifts
        self.tparts: dict[tuple, tuple] = {}

    def new_call(self) -> None:
        """The visit's next IPs go in another call."""
        self.tparts = {}

    def add(self, batch: RecordBatch, pkey: tuple, info: PlaceInfo, f: int, bucket: int, rb: int | None,
            since: int) -> None:
        """The torrent part of the IP of fingerprint ``f`` at place ``pkey`` (its roster bucket, its group
        record's, None: none), its place marks fresh since ``since``."""
        tp = self.tparts.get(pkey)
        if tp is None:
            head = batch.torrent_head(pkey, info, self.country_keys) | (1 << 8 * info.t_nbytes)  # form 1
            tp = self.tparts[pkey] = (head, info.torrent_lanes(self.part.t_fp), info.t_r, info.t_bshift,
                                      info.t_rshift, info.t_oshift, info.t_nbytes + 1)
        head, tl, t_r, bshift, rshift, oshift, nbytes = tp
        numbers = batch.bnumbers
        rec = ((numbers.setdefault(bucket, len(numbers) + 1) << bshift) | head | (tl ^ (f & LOW64) * t_r)
               | (since << oshift))
        if rb is not None:
            rec |= numbers.setdefault(rb, len(numbers) + 1) << rshift
        batch.ips += rec.to_bytes(nbytes, "big")
