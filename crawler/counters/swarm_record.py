"""One lookup settling a revisit of the same peers at the same places: the swarm record.

Strategy. On a revisit most swarms are the peers they were, and the probe
(``probe.lua``) then reads every IP's group record to learn that nothing can
count. A visit's distinct IPs, each at its place, have one fingerprint
together: the sum modulo 2**128 of their ``fresh_places`` keys (each the
IP's keyed fingerprint XOR its place's, ``Fingerprinter.where``: the same in
every process), with their count and the torrent's fingerprint, hashed with
the secret to 8 bytes (``Fingerprinter.swarm``). Its record, a mark like any
other (8-byte field, u32 time), lives in the torrent's roster where a
group record of such a swarm would (``marks.roster_width``), its time the
oldest of those IPs' records when it was written. While that time is inside
the window every mark of every one of those IPs at those places is fresh
(marks are only renewed once expired, and only expired ones are swept), so
nothing of the visit can count: ``probe.lua`` looks it up first, and a
fresh one ends the recording there with one bucket read, no group record
read (a swarm of 50 spreads over four roster buckets and 50 searches).

The IPs of a visit the recorder locates itself (``Recorder.record_visits``) have
their places from its locator, so their record is keyed by the IPs alone and
that locator's identity (its database and name bound:
``Fingerprinter.swarm_ips``, ``swarm_of_ips``), and a revisit it settles is
neither located nor fingerprinted, only parsed: on a revisit of peers the
process has not met (a new process, a crawl of more addresses than it keeps)
meeting them was most of the recording's cost. A batch whose meeting met a
database read error writes no record (an IP read in error has no place
marks to vouch for). Visits given with their places (``record_places_many``)
keep the key of their (IP, place) pairs above.

Where most revisits find their record, it is asked for before any IP is
met or packed for the probe, which a fresh one spares: one ``swarm_check.lua``
call for a batch's visits in a counter shard (a script call costs Redis more
than the lookup it makes); where few do (swarms that change), that call would
only add a round trip, so the record travels with the probe. ``Lookups``
follows which is the case from the answers.

The record is written by the script that last saw every IP of the visit:
``probe.lua`` when it found every IP's group record fresh, ``record.lua``
when the visit's IPs all went to one of its calls (a first visit); a visit
of several calls, or of a crawl of several counter shards past the probe,
writes none, and its next revisit probes and writes it. A swarm that
changed by one peer, or an IP placed elsewhere (another GeoIP database),
has another fingerprint: its record is not found and the probe goes on as
before, one bucket search later. Like a group record it is a shortcut kept in
the torrent's shard, trusted as Redis keeps what it acknowledged
(docs/redis.md, "What a failover can lose").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from operator import itemgetter

from crawler.counters.ip_forms import packed_ips
from crawler.counters.marks import Fingerprinter, roster_width
from crawler.counters.met_ips import Met
from crawler.counters.names import info_hash_hex
from crawler.counters.script_args import FRESH, RecordBatch, VisitPart
from crawler.counters.shard_keys import ShardKeys

MOD128 = (1 << 128) - 1
_FRESH_KEY = itemgetter(3)  # a Met's fresh_places key
_PACKED = itemgetter(0)  # a Met's packed IP
# probe.lua's answer for a visit its swarm record settles (and swarm_check.lua's byte for one)
SETTLED = b"S"
# Visits whose swarm records one swarm_check.lua call looks up (its MGET has at most as many keys).
CHECKS = 256


def swarm_of(fingerprints: Fingerprinter, t_fp: int, ips: Sequence[Met], n_buckets: int) -> tuple[int, bytes]:
    """The swarm record of a visit of the torrent of fingerprint ``t_fp`` whose distinct IPs are ``ips``
    (as ``met_ips`` meets them, at the places the caller gave): ``(bucket, field)``, its mark bucket
    among the shard's ``n_buckets`` and its 8-byte field."""
    return _at(t_fp, fingerprints.swarm(t_fp, sum(map(_FRESH_KEY, ips)) & MOD128, len(ips)), len(ips), n_buckets)


def swarm_of_ips(fingerprints: Fingerprinter, t_fp: int, packed: Collection[bytes], n_buckets: int,
                 identity: bytes) -> tuple[int, bytes]:
    """``swarm_of`` for a visit whose IPs the recorder's own locator places: keyed by its distinct packed
    IPs ``packed`` and the locator's ``identity`` (``geo.Locator.identity``), which decide every place."""
    return _at(t_fp, fingerprints.swarm_ips(t_fp, packed, identity), len(packed), n_buckets)


def _at(t_fp: int, field: bytes, n: int, n_buckets: int) -> tuple[int, bytes]:
    """The record ``field`` of a swarm of ``n`` IPs in its torrent's roster: ``(bucket, field)``."""
    return (t_fp % n_buckets + int.from_bytes(field, "big") % roster_width(n)) % n_buckets, field


class Swarms:
    """A recorder's swarm records: each visit's (``of_ips`` where the recorder's own locator placed its IPs,
    ``of_places`` where the caller gave their places) and what asking for them found: ``known``, the
    visits they settled, and ``lookups``. ``locator``: the recorder's (its ``identity`` read when a record
    is keyed by IPs: a recorder given every place may have a placeholder)."""

    def __init__(self, fingerprints: Fingerprinter, locator):
        self.fingerprints, self.locator = fingerprints, locator
        self.known = 0
        self.lookups = Lookups()  # whether they are asked for before the probes or with them

    def of_ips(self, t_fp: int, ips: list[Met]) -> tuple[int, bytes]:
        """The record of a visit of met ``ips`` placed by the recorder's locator (``swarm_of_ips``)."""
        fps = self.fingerprints
        return swarm_of_ips(fps, t_fp, list(map(_PACKED, ips)), fps.buckets, self.locator.identity)

    def of_places(self, t_fp: int, ips: list[Met]) -> tuple[int, bytes]:
        """The record of a visit of met ``ips`` at the places the caller gave (``swarm_of``)."""
        return swarm_of(self.fingerprints, t_fp, ips, self.fingerprints.buckets)

    def of_texts(self, visits: Sequence[tuple[str, Collection[str]]], probes: Sequence[bool] | None) -> list[tuple]:
        """``(position, info-hash, record)`` of each probed visit of ``visits`` (info-hash, IP texts or
        ``PackedIPs``) with an IP, keyed by its IPs parsed alone (``ip_forms.packed_ips``): none located
        or fingerprinted."""
        fps, identity, asked = self.fingerprints, self.locator.identity, []
        for i, (info_hash, ips) in enumerate(visits):
            if ips and (probes is None or probes[i]) and (packed := packed_ips(ips)):
                h = info_hash_hex(info_hash)
                asked.append((i, h, swarm_of_ips(fps, fps.torrent(h), packed, fps.buckets, identity)))
        return asked

    def saw(self, found: int, asked: int) -> None:
        """``found`` of ``asked`` visits' records were fresh (asked before or with the probes)."""
        self.known += found
        self.lookups.saw(found, asked)


class Lookups:
    """How often the probed visits of a process found their swarm record fresh, lately: each batch's
    share weighs ``1 - DECAY`` of the figure. ``first()``: whether to ask for the records in a call of
    their own before packing the probes (at least half found theirs; so at the start)."""

    DECAY = 0.8

    def __init__(self):
        self.found = self.asked = 0.0

    def first(self) -> bool:
        """Whether the next batch asks for its records before its probes."""
        return 2 * self.found >= self.asked

    def saw(self, found: int, asked: int) -> None:
        """``found`` of ``asked`` probed visits found their swarm record fresh."""
        if asked:
            self.found = self.found * self.DECAY + found
            self.asked = self.asked * self.DECAY + asked


def check_calls(script, home: Callable[[str], ShardKeys], cutoff: int,
                asked: Sequence[tuple]) -> tuple[list[list[tuple]], list[tuple]]:
    """The swarm_check.lua calls that look up the swarm records of the visits ``asked`` (position,
    info-hash, record) before their IPs are met: one a counter shard (``home(info-hash)``) and ``CHECKS``
    visits. Returns the visits of each call and the calls (``settled_of`` reads their answers)."""
    by_shard: dict[ShardKeys, list[tuple]] = {}
    for a in asked:
        by_shard.setdefault(home(a[1]), []).append(a)
    groups, calls = [], []
    for shard, visits in by_shard.items():
        for at in range(0, len(visits), CHECKS):
            g = visits[at : at + CHECKS]
            groups.append(g)
            calls.append(check_call(script, shard, cutoff, [(h, swarm) for _, h, swarm in g]))
    return groups, calls


def settled_of(groups: list[list[tuple]], replies: list[bytes]) -> set[int]:
    """The positions of the visits whose record the ``check_calls`` answered fresh."""
    return {a[0] for g, r in zip(groups, replies, strict=True) for a, flag in zip(g, r, strict=True)
            if flag == SETTLED[0]}


def check_call(script, shard: ShardKeys, cutoff: int, asked: Sequence[tuple[str, tuple[int, bytes]]]) -> tuple:
    """The swarm_check.lua call that looks up the swarm records (``swarm_of``) of the visits ``asked``
    (info-hash, record) of torrents of ``shard`` (``cutoff``: now - window): it answers one byte a visit,
    ``SETTLED`` for each whose record is fresh."""
    numbers: dict[int, int] = {}
    args = bytearray()
    for h, (bucket, field) in asked:
        args += h.encode() + numbers.setdefault(bucket, len(numbers) + 1).to_bytes(2, "big") + field
    return script, [shard.torrents, *map(shard.bucket, numbers)], [cutoff, bytes(args)]


def probe_arg(part: VisitPart) -> list[bytes]:
    """probe.lua's ARGV[4] for ``part`` (empty: none): its record, looked up before any IP's, and
    written when every IP is fresh; only for a part of one probe call, which sees every IP."""
    if part.swarm is None or len(part.probes) != 1:
        return []
    bucket, field = part.swarm
    numbers = part.probe.bnumbers
    return [numbers.setdefault(bucket, len(numbers) + 1).to_bytes(2, "big") + field]


def swarms_in(calls: list[RecordBatch], todo: list) -> None:
    """Each visit of ``todo`` (position, info-hash, ``VisitPart``, probe flags) with a swarm record whose
    IPs all went to one of ``calls`` has that call write the record (record.lua's ARGV[10])."""
    holders: dict[int, list[RecordBatch]] = {}
    for b in calls:
        for i in b.order:
            holders.setdefault(i, []).append(b)
    for i, _, part, flags in todo:
        held = holders.get(i)
        if part.swarm is not None and FRESH not in flags and held is not None and len(held) == 1:
            held[0].add_swarm(i, *part.swarm)
