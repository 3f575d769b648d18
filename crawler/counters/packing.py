"""A visit's IPs packed, bit by bit, into the binary arguments of probe.lua and record.lua.

Each IP is fingerprinted once (``marks.Fingerprinter``: 128 bits, the high
half picks its mark buckets, the low half is XORed into each of its metric
fields; kept in ``Fingerprinter.known`` for the next swarm or revisit that
meets it), and its records are built as one integer, turned into bytes once:

- ``visit_part``: probe.lua's ``probes``, per IP a u16 bucket number (of its
  bucket in the torrent's roster, ``marks.roster_width``, or without a country
  of the (IP, torrent) bucket; 1-based among the call's) and the 8-byte field
  of its probe lane (the group record, or the users mark without a country);
- ``add_visit``: record.lua's ``ips``, per IP its header (bucket numbers,
  place number, k) and its metric fields, the lanes of ``places.PlaceInfo``
  (``lanes ^ low64 * r``: one multiply and one XOR per IP); in one shard's
  mixed calls, an IP whose place marks are known fresh as a torrent part.

The layouts are those of the scripts' headers (``crawler/counters/*.lua``);
the containers the bytes go in are ``calls``'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.marks import IP_MEMO, Fingerprinter, roster_width
from crawler.counters.places import PlaceInfo
from crawler.counters.script_args import FRESH, LOW64, ProbeCall, RecordBatch, RecordBatches, ShardKeys, VisitPart
from geo.locator import Place


def visit_part(shard: ShardKeys, h: str, t_fp: int, located: Iterable[tuple[bytes, Place]],
               fingerprints: Fingerprinter, place_info: Callable[[tuple], PlaceInfo], split: bool,
               probe_ips: int) -> VisitPart | None:
    """Fingerprint each distinct IP of ``located`` into probe.lua calls of ``probe_ips`` IPs
    in ``shard``, the one holding the counters of torrent ``h`` (``t_fp``: its fingerprint).

    Returns the visit's part (None without IPs), with its rows ``(place
    tuple, (PlaceInfo, metric lanes of this visit, its probe lane), IP
    fingerprint, bucket of (IP, torrent))`` in its calls' order. The
    lanes are the whole record's, or with several shards (``split``) the torrent
    part's (``PlaceInfo``); the probe lane (the group record, or the users
    mark without a country) is the same in both. A row's last part is the
    bucket of its group record in the torrent's roster (None: no group record,
    the IP has no country). ``place_info(place tuple)`` gives a place's
    ``PlaceInfo``. ``probe_ips`` 0: no probe calls (the visit is not probed).
    """
    fps = fingerprints
    ip_hash, n_buckets, from_bytes = fps.ip_hasher().copy, fps.buckets, int.from_bytes
    if not isinstance(located, list | tuple):
        located = list(located)
    width, roster = roster_width(len(located)), t_fp % n_buckets  # the torrent's roster
    known = fps.known
    if len(known) > IP_MEMO:
        known.clear()
    vplaces: dict = {}  # place tuple -> (info, metric lanes of this visit, its probe lane)
    part = VisitPart(shard, h, t_fp)
    rows = part.rows
    probe = part.probe
    bnumbers = probe.bnumbers
    distinct: set[bytes] = set()
    for packed, place in located:
        if packed in distinct:
            continue
        distinct.add(packed)
        pkey = (place.country, place.city, place.postcode)
        vp = vplaces.get(pkey)
        if vp is None:
            info = place_info(pkey)
            if split:
                lanes = info.torrent_lanes(t_fp)
                vp = vplaces[pkey] = (info, lanes, lanes >> (info.t_shift - 64))
            else:
                lanes = info.g ^ t_fp * info.tr
                vp = vplaces[pkey] = (info, lanes, lanes >> (info.shift - 64))
        f = known.get(packed)
        if f is None:  # an IP this process has not met lately
            d = ip_hash()
            d.update(packed)
            f = known[packed] = from_bytes(d.digest(), "big")
        bucket = ((f >> 64) ^ t_fp) % n_buckets
        # the group record's bucket in the roster, or the users mark's without a country
        rb = (roster + (f >> 64) % width) % n_buckets if vp[0].k >= 3 else None
        rows.append((pkey, vp, f, bucket, rb))
        if not probe_ips:
            continue
        if probe.n == probe_ips:
            probe = part.probe = ProbeCall()
            part.probes.append(probe)
            bnumbers = probe.bnumbers
        b = bnumbers.setdefault(bucket if rb is None else rb, len(bnumbers) + 1)
        probe.args += ((b << 64) | (vp[2] ^ (f & LOW64))).to_bytes(10, "big")
        probe.n += 1
    return part if rows else None


def add_visit(batches: RecordBatches, i: int, h: str, part: VisitPart, flags: bytes, n_buckets: int,
              fresh: FreshPlaces | None = None, cutoff: int = 0) -> None:
    """Add the rows of visit ``i`` (torrent ``h``) whose probe flag is not fresh to the
    record.lua calls of ``batches`` (an IP's pairs are never split across calls).

    ``n_buckets``: the mark buckets of a shard, among which an IP's place marks
    are bucketed by the IP alone. In mixed calls (``batches.mixed``), each
    record has its form byte first, and an IP whose place marks ``fresh`` says
    are fresh after ``cutoff`` goes as a torrent part carrying their time.

    The call an IP goes in is asked of ``batches`` only when the IP does not
    fit in the one before; the IPs in between are added to it here.
    """
    shard = part.shard
    country_keys, limit = shard.country_keys, batches.limit
    mixed, t_fp = batches.mixed, part.t_fp
    since_of = fresh.since if mixed and fresh is not None else None
    tlanes: dict[tuple, int] = {}  # place tuple -> its torrent part's lanes in this visit
    batch: RecordBatch | None = None
    for (pkey, (info, lanes, _), f, bucket, rb), flag in zip(part.rows, flags):
        if flag == FRESH:
            continue
        key = since = 0
        if since_of is not None and rb is not None:  # a place with a country: its place marks may be known fresh
            key = FreshPlaces.key(f, pkey)
            since = since_of(key, cutoff)
        pairs = info.t_k if since else info.k
        if batch is None or batch.pairs + pairs > limit:
            batch = batches.batch_for(shard, i, h, pairs)
            numbers = batch.bnumbers
        else:
            batch.add_ip(pairs)
        if since:
            tl = tlanes.get(pkey)
            if tl is None:
                tl = tlanes[pkey] = info.torrent_lanes(t_fp)
            rec = batch.torrent_record(info, batch.torrent_head(pkey, info, country_keys), tl, f, bucket, rb)
            rec |= (since << info.t_oshift) | (1 << 8 * info.t_nbytes)  # its place time; form 1
            batch.ips += rec.to_bytes(info.t_nbytes + 1, "big")
            continue
        head = batch.heads.get(pkey)
        if head is None:
            head = batch.add_place(pkey, info, country_keys)
        # the torrent's marks of this IP: bucket by (IP, torrent)
        tb = numbers.setdefault(bucket, len(numbers) + 1)
        # its place marks: bucket by IP alone
        gb = numbers.setdefault((f >> 64) % n_buckets, len(numbers) + 1) if info.k > 1 else 0
        # its group record: in the torrent's roster
        rn = 0 if rb is None else numbers.setdefault(rb, len(numbers) + 1)
        # in a mixed call, form 0 (a leading zero byte)
        batch.ips += ((rn << info.rshift) | (tb << info.tshift) | (gb << info.gshift) | head
                      | (lanes ^ (f & LOW64) * info.r)).to_bytes(info.nbytes + mixed, "big")
        if key:
            batch.learn.append(key)
