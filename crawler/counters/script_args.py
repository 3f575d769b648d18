"""The arguments of one visit's probe.lua, record.lua and places.lua calls, built IP by IP.

``VisitPart`` holds a visit's IPs
and its probe.lua calls (at most ``recorder.PROBE_IPS`` IPs each);
``RecordBatch`` one record.lua call (at most ``batch_pairs`` (metric, IP)
pairs of one or more visits, never splitting an IP's metrics), and
``RecordBatches`` a recording's calls, ``PlaceCall`` one places.lua call
(an IP's place metrics in its own shard, crawls of several shards). Each
numbers the mark buckets it passes, so a record names its buckets by a
small index into KEYS. The layouts are those of the scripts' headers
(``crawler/counters/*.lua``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crawler.counters.places import PlaceInfo
from crawler.counters.shard_keys import ShardKeys, bucket_keys

# probe.lua's flag of an IP whose group record is fresh (nothing of it can count)
FRESH = ord("0")
# the low 64 bits of an IP's fingerprint: the half XORed into each of its metric fields
LOW64 = (1 << 64) - 1


class ProbeCall:
    """The arguments of one probe.lua call: ``bnumbers`` numbers its mark buckets (``bucket_keys``)."""

    __slots__ = ("args", "bnumbers", "n")

    def __init__(self):
        self.bnumbers: dict = {}
        self.args = bytearray()
        self.n = 0


class RecordBatch:
    """The arguments of one record.lua call, built IP by IP: IPs of one or more visits
    (distinct torrents) of one shard, one visit after the other.

    ``shard``: its shard (its keys start with ``ShardKeys.shared``: the outbox and the
    torrents and countries indexes); ``month``: the visits' month (``names.month_of``); ``torrent_part``: the
    call records only the torrents' metrics (record.lua's part "T"), so an
    IP's header counts those (``PlaceInfo.t_*``); ``mixed``: one shard's call
    whose IPs are each a whole record or, when the process knows its place
    marks are fresh, a torrent part (record.lua's "M"); ``learn`` then lists
    the ``fresh_places`` key of each whole record with a group record, in
    order, for the place mark times the call answers.
    """

    __slots__ = ("bnumbers", "countries", "country_numbers", "extras", "heads", "ips", "keys", "learn", "mixed",
                 "month", "order", "pairs", "pending", "places", "shard", "swarms", "theads", "torrent_part",
                 "visit_start", "visits", "widths")

    def __init__(self, shard: ShardKeys, month: str, torrent_part: bool = False, mixed: bool = False):
        self.shard, self.month, self.torrent_part, self.mixed = shard, month, torrent_part, mixed
        self.keys = list(shard.shared(month))
        self.learn: list[int] = []
        self.theads: dict[tuple, int] = {}  # mixed: place tuple -> its torrent parts' header bits
        self.pending: list = []  # torrent part: (record without its place time, PlaceInfo, place answer)
        self.bnumbers: dict = {}  # mark bucket -> its 1-based number in this call (``bucket_keys``), after ``keys``
        self.countries = bytearray()
        self.country_numbers: dict[str, int] = {}
        self.places = bytearray()
        self.heads: dict[tuple, int] = {}  # place tuple -> its IPs' header bits
        self.ips = bytearray()
        self.pairs = 0
        # per visit: [info-hash, key position of its indexes, IP records, its torrent parts in blocks]
        self.visits: list = []
        self.order: list = []  # per visit: its position in the recording (what its count answers)
        self.visit_start = 0  # where the records of the visit begun last start in ``ips``
        self.swarms = bytearray()  # record.lua's ARGV[10]: the swarm records it writes
        self.widths = bytearray()  # ARGV[11]: per visit, where its torrent's marks are (``VisitPart``)
        self.extras = bytearray()  # ARGV[12]: per IP of a visit with other widths, their buckets

    def begin_visit(self, i: int, part: "VisitPart", torrent_keys: list) -> None:
        """The IPs added next are visit ``i``'s (``part``: its torrent's, ``torrent_keys``: its two
        indexes)."""
        self.visits.append([part.h, len(self.keys) + 1, 0, False])
        self.visit_start = len(self.ips)
        self.keys += torrent_keys
        self.order.append(i)
        numbers = self.bnumbers
        self.widths += (numbers.setdefault(part.b0, len(numbers) + 1).to_bytes(2, "big")
                        + bytes((part.code, part.mask, len(part.others) + part.legacy)) + part.base)

    def add_extras(self, part: "VisitPart", f: int, n_buckets: int) -> None:
        """The buckets where the torrent marks of the IP of fingerprint ``f`` may also be, when
        ``part``'s torrent has some (its other widths; by (IP, torrent) when ``legacy``)."""
        numbers, hi, b0 = self.bnumbers, f >> 64, part.b0
        for w in part.others:
            self.extras += numbers.setdefault((b0 + hi % w) % n_buckets, len(numbers) + 1).to_bytes(2, "big")
        if part.legacy:
            self.extras += numbers.setdefault((hi ^ part.t_fp) % n_buckets, len(numbers) + 1).to_bytes(2, "big")

    def add_ip(self, pairs: int) -> None:
        """Count one more IP of the visit begun last, of ``pairs`` pairs."""
        self.visits[-1][2] += 1
        self.pairs += pairs

    def add_swarm(self, i: int, bucket: int, field: bytes) -> None:
        """Visit ``i``, whose IPs are all in this call, writes its swarm record (``swarm_record``:
        its mark ``bucket`` of the shard and 8-byte ``field``)."""
        v = self.order.index(i) + 1
        b = self.bnumbers.setdefault(bucket, len(self.bnumbers) + 1)
        self.swarms += v.to_bytes(2, "big") + b.to_bytes(2, "big") + field

    def args(self, now: int, cutoff: int, post: str) -> list:
        """record.lua's ARGV at time ``now`` (``cutoff``: now - window; ``post``: its ARGV[4])."""
        args: list = [now, cutoff, self.visits_arg(), post, bytes(self.countries), bytes(self.places), len(self.keys),
                      bytes(self.ips)]
        part = "T" if self.torrent_part else "M" if self.mixed else ""
        if part or self.swarms or self.widths:
            args.append(part)
        if self.swarms or self.widths:
            args.append(bytes(self.swarms))
        if self.widths:
            args += [bytes(self.widths), bytes(self.extras)]
        return args

    def visits_arg(self) -> bytes:
        """record.lua's ARGV[3]: per visit its info-hash, key position and number of IP records (the
        top bit: its torrent parts in blocks)."""
        return b"".join(h.encode() + pos.to_bytes(2, "big") + (n | blocked << 31).to_bytes(4, "big")
                        for h, pos, n, blocked in self.visits)

    def add_blocks(self, blocks: dict) -> None:
        """The visit begun last takes some of its IPs, added as records, in torrent part blocks
        (record.lua's flagged visit): ``blocks``, per mark bucket of the shard, ``(IPs per place number,
        group records, torrent marks as records of the call's time)``, go before its records."""
        self.ips[self.visit_start:self.visit_start] = self.blocks_arg(self.visits[-1], blocks)

    def blocks_arg(self, visit: list, blocks: dict) -> bytearray:
        """The blocks of ``add_blocks`` as record.lua reads them before the records of ``visit``
        (an entry of ``visits``), which then counts the blocks' IPs as records no more, and is flagged."""
        numbers = self.bnumbers
        out = bytearray(len(blocks).to_bytes(2, "big"))
        ips = 0
        for bucket, (counts, groups, fields) in blocks.items():
            out += numbers.setdefault(bucket, len(numbers) + 1).to_bytes(2, "big") + len(counts).to_bytes(2, "big")
            for place, n in counts.items():
                out += place.to_bytes(2, "big") + n.to_bytes(2, "big")
                ips += n
            out += groups
            out += fields
        visit[2] -= ips
        visit[3] = True
        return out

    def add_place(self, pkey: tuple, info: PlaceInfo, country_keys: Callable[[str, str], list]) -> int:
        """Number the place (and its country) in this batch; returns its IPs' header bits.

        ``country_keys(country, month)``: the six per-country index keys
        record.lua gets for a country new to this batch.
        """
        c: int | None = 0
        if info.country is not None:
            c = self.country_numbers.get(info.country)
            if c is None:
                pos = len(self.keys) + 1
                self.keys += country_keys(info.country, self.month)
                self.countries += pos.to_bytes(2, "big") + info.country_s
                c = self.country_numbers[info.country] = len(self.country_numbers) + 1
        self.places += c.to_bytes(2, "big") + info.tail
        head = self.heads[pkey] = _head(len(self.heads) + 1, info, self.torrent_part)
        return head

    def torrent_head(self, pkey: tuple, info: PlaceInfo, country_keys: Callable[[str, str], list]) -> int:
        """In a mixed call, the header bits of a torrent part at this place (numbered as its
        whole records are: ``add_place``)."""
        head = self.theads.get(pkey)
        if head is None:
            head = self.theads[pkey] = _head(self.place_number(pkey, info, country_keys), info, True)
        return head

    def place_number(self, pkey: tuple, info: PlaceInfo, country_keys: Callable[[str, str], list]) -> int:
        """The place's number in this call (``add_place`` numbers it when new)."""
        head = self.heads.get(pkey)
        if head is None:
            head = self.add_place(pkey, info, country_keys)
        return head >> ((info.t_shift if self.torrent_part else info.shift) + 8)

    def torrent_record(self, info: PlaceInfo, head: int, lanes: int, f: int, bucket: int, rb: int | None) -> int:
        """An IP's torrent part (``PlaceInfo.t_*``) without its place mark time: its bucket in the
        torrent's roster, its group record's (``rb``; None: none), ``head`` (``add_place`` or
        ``torrent_head``) and its fields, ``lanes`` (``PlaceInfo.torrent_lanes``) with the low half
        of its fingerprint ``f``."""
        numbers = self.bnumbers
        rec = (numbers.setdefault(bucket, len(numbers) + 1) << info.t_bshift) | head | (lanes ^ (f & LOW64) * info.t_r)
        if rb is not None:
            rec |= numbers.setdefault(rb, len(numbers) + 1) << info.t_rshift
        return rec

    def all_keys(self) -> list[bytes]:
        """The call's keys: ``keys``, then its mark buckets (``bucket_keys``)."""
        return self.keys + bucket_keys(self.bnumbers, self.shard)


def _head(n: int, info: PlaceInfo, torrent_part: bool) -> int:
    """The header bits of place number ``n``'s IPs: place number and k, of a whole record or (``torrent_part``)
    of a torrent part."""
    if torrent_part:
        return ((n << 8) | info.t_k) << info.t_shift
    return ((n << 8) | info.k) << info.shift


class RecordBatches:
    """The record.lua calls of one recording: each shard's visits packed into calls of at most
    ``limit`` pairs (an IP's pairs never split), in the order they must run.

    A call holds several visits so that they share its fixed cost and the
    indexes they have in common (torrents, countries, the countries' own);
    a visit too large for what is left of a call goes on in the next, and
    one torrent never has two visits in a call (record.lua takes a visit's
    torrent as never counted when its index says so at the visit's start).
    """

    __slots__ = ("calls", "limit", "mixed", "month", "open", "torrent_part")

    def __init__(self, limit: int, month: str, torrent_part: bool = False, mixed: bool = False):
        self.limit, self.month, self.torrent_part, self.mixed = limit, month, torrent_part, mixed
        self.open: dict = {}  # ShardKeys -> its call being filled
        self.calls: list[RecordBatch] = []

    def batch_for(self, part: "VisitPart", i: int, pairs: int) -> RecordBatch:
        """The call of ``part``'s shard that takes the next IP (``pairs`` pairs) of visit ``i`` (``part``
        its torrent's)."""
        shard, h = part.shard, part.h
        b = self.open.get(shard)
        new_visit = b is None or not b.order or b.order[-1] != i
        if b is None or (b.pairs and b.pairs + pairs > self.limit) or (
                new_visit and any(v[0] == h for v in b.visits)):
            b = self.open[shard] = RecordBatch(shard, self.month, self.torrent_part, self.mixed)
            self.calls.append(b)
            new_visit = True
        if new_visit:
            b.begin_visit(i, part, shard.torrent_keys(h, self.month))
        b.add_ip(pairs)
        return b


class PlaceCall:
    """The arguments of one places.lua call: IPs of one shard, their place metrics.

    ``shard``: the IPs' shard. ``answer`` is where the IPs' oldest place mark
    times land once the call ran (``recorder``).
    """

    __slots__ = ("answer", "bnumbers", "countries", "country_numbers", "fps", "ips", "n", "pairs",
                 "place_numbers", "places", "shard")

    def __init__(self, shard: ShardKeys):
        self.shard = shard
        self.bnumbers: dict = {}  # mark bucket -> its 1-based number in this call (``bucket_keys``)
        self.countries = bytearray()
        self.country_numbers: dict[str, int] = {}
        self.places = bytearray()
        self.place_numbers: dict[tuple, int] = {}
        self.ips = bytearray()
        self.n = self.pairs = 0
        self.fps: set[int] = set()  # the fingerprints of its IPs: an IP goes in a call once
        self.answer = b""

    def place_head(self, pkey: tuple, info: PlaceInfo) -> int:
        """Number the place (and its country) in this call; returns its IPs' header bits."""
        head = self.place_numbers.get(pkey)
        if head is None:
            c = self.country_numbers.get(info.country)
            if c is None:
                self.countries += info.country_s
                c = self.country_numbers[info.country] = len(self.country_numbers) + 1
            self.places += c.to_bytes(2, "big") + info.tail
            n = len(self.place_numbers) + 1
            head = self.place_numbers[pkey] = ((n << 8) | info.p_m) << info.p_shift
        return head

    def bucket_number(self, n: int) -> int:
        """The 1-based number of the shard's mark bucket ``n`` among this call's buckets."""
        numbers = self.bnumbers
        return numbers.setdefault(n, len(numbers) + 1)

    def oldest(self, i: int) -> int:
        """The oldest place mark time of this call's ``i``-th IP (0-based), from its answer."""
        return int.from_bytes(self.answer[4 * i : 4 * i + 4], "big")


class VisitPart:
    """A visit's distinct IPs and their probe.lua calls, in the shard that holds the
    counters of its torrent ``h``.

    ``rows``: per IP ``(place tuple, (PlaceInfo, lanes, probe lane, has a
    group record), fingerprint, its bucket in the torrent's roster, that
    bucket again when it holds a group record (None: the IP has no country),
    its ``fresh_places`` key)``, in the calls' order (``packing.visit_part``).
    ``swarm``: its swarm record (``swarm_record.swarm_of``), written by the
    call that sees every IP.

    Where the torrent's marks are (``marks``' module note): ``b0`` the roster's
    first bucket, ``code`` the visit's width, ``base`` the torrent's width base;
    ``mask`` the codes the record calls carry buckets for (the visit's, and
    those the probe answered: ``widen``), ``others`` their widths but the
    visit's, ``legacy`` whether marks may also be by (IP, torrent). ``fresh``: the caller
    believes the shard never counted the torrent (its torrent parts may go in blocks:
    ``packing.add_visit``).

    ``count``: its distinct IPs; ``met``, those of an unprobed visit until a call needs its ``rows``
    (``packing.rows_of``, from ``width``, its roster's, and ``place_info``, the recorder's places).
    """

    __slots__ = ("b0", "base", "code", "count", "fresh", "h", "legacy", "mask", "met", "others", "place_info",
                 "probe", "probes", "rows", "shard", "swarm", "t_fp", "width")

    def __init__(self, shard: ShardKeys, h: str, t_fp: int = 0):
        self.shard, self.h, self.t_fp = shard, h, t_fp
        self.rows: list = []
        self.met: Sequence | None = None  # IPs as met whose rows are not made yet
        self.place_info: Callable[[tuple], PlaceInfo] | None = None
        self.count = self.width = 0
        self.probe = ProbeCall()
        self.probes = [self.probe]
        self.swarm: tuple[int, bytes] | None = None
        self.b0 = self.code = 0
        self.mask = 1
        self.base = bytes(7)
        self.others: tuple[int, ...] = ()
        self.legacy = self.fresh = False

    def widen(self, mask: int) -> None:
        """The record calls also carry the buckets of the codes of ``mask`` (the probe's answer)."""
        self.mask |= mask
        self.others = tuple(4 ** c for c in range(7) if self.mask >> c & 1 and c != self.code)
