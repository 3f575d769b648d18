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

Where most revisits find their record, it is asked for in a call of its
own before any IP is packed for the probe, which a fresh one spares; where
few do (swarms that change), that call would only add a round trip, so it
travels with the probe. ``Lookups`` follows which is the case from the
answers.

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

from collections.abc import Sequence
from operator import itemgetter

from crawler.counters.marks import Fingerprinter, roster_width
from crawler.counters.met_ips import Met
from crawler.counters.script_args import FRESH, RecordBatch, ShardKeys, VisitPart

MOD128 = (1 << 128) - 1
_FRESH_KEY = itemgetter(3)  # a Met's fresh_places key
# probe.lua's answer for a visit its swarm record settles
SETTLED = b"S"


def swarm_of(fingerprints: Fingerprinter, t_fp: int, ips: Sequence[Met], n_buckets: int) -> tuple[int, bytes]:
    """The swarm record of a visit of the torrent of fingerprint ``t_fp`` whose distinct IPs are ``ips``
    (as ``met_ips`` meets them): ``(bucket, field)``, its mark bucket among the shard's ``n_buckets``
    and its 8-byte field."""
    field = fingerprints.swarm(t_fp, sum(map(_FRESH_KEY, ips)) & MOD128, len(ips))
    width = roster_width(len(ips))
    return (t_fp % n_buckets + int.from_bytes(field, "big") % width) % n_buckets, field


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


def check_call(script, shard: ShardKeys, h: str, cutoff: int, swarm: tuple[int, bytes]) -> tuple:
    """The probe.lua call that only looks up swarm record ``swarm`` (``swarm_of``) of torrent ``h`` in
    ``shard`` (``cutoff``: now - window): it answers ``SETTLED`` when the record is fresh."""
    bucket, field = swarm
    return script, [shard.torrents, shard.bucket(bucket)], [cutoff, h, b"", b"\x00\x01" + field]


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
