"""The calls of the queue's largest scripts: what ``add.lua``, ``claim.lua`` and ``complete.lua`` take and answer.

``crawler.queue.queue.Queue`` makes the transitions; this module only
builds the KEYS and ARGV of one such call and reads its reply (``Lease``, the
add statuses), with the lanes' key lists the scripts share (``lane_keys``,
``member_keys``). The functions here are free of Redis and of the clock, so
the layout of a call can be checked without running it. The order of each
list is the one the script's header states.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from crawler.keys import Keys
from crawler.queue.lanes import MARKED
from crawler.queue.rates import rt_field
from crawler.queue.scoring import Outcome, multiplier
from crawler.settings import Settings
from crawler.torrents.items import NewItem
from crawler.torrents.torrent_names import clean

# Housekeeping moves at most this many expired leases, due torrents and old
# tombstones each per call. A claim of n moves 2n + 8: more than it takes,
# so a backlog of due torrents drains as fast as workers claim, while each
# claim stays a few tens of microseconds of Redis time however large the
# backlog (a fixed 200 per claim made every claim of one cost ~1 ms while a
# million new torrents waited). While more than that are due, it also moves
# up to n + 1 of each of the high, low and discovered lanes' own due
# torrents (claim.lua), so no lane's torrents wait behind another's.
HOUSEKEEPING_BUDGET = 200

ADD_STATUS = {"a": "added", "t": "already_tracked", "e": "skipped_evicted", "r": "added",
              "Q": "skipped_quarantined", "q": "readmitted"}


@dataclass(frozen=True)
class Lease:
    """A claimed torrent: its info-hash, score at claim, lease token, the unix time of the
    claim (0: unknown; the visit's round trip is then not counted, crawler/queue/rates.py) and
    its lane at the claim ("": unknown)."""

    info_hash: str
    score: float
    token: int
    claimed: float = 0.0
    lane: str = ""


def minute(now: float) -> str:
    """The per-minute counts' field of ``now``: its minute's first unix second."""
    return str(int(now // 60) * 60)


def lane_keys(k: Keys) -> list[str]:
    """The ready sets, then the member sets, of the high, low and discovered lanes (the scripts'
    order; the normal lane's ready set is ``ready`` and it has no member set)."""
    return [k.ready_in(lane) for lane in MARKED] + [k.lane_members(lane) for lane in MARKED]


def member_lanes(lane: str) -> tuple[str, ...]:
    """The lanes whose member sets a script that puts a torrent leased in ``lane`` (``Lease.lane``)
    back to cooling writes its due time to (each is also its lane's due index, ``claim.lua``): its
    own, none for the normal lane, all three when its lane is unknown. A torrent moved to another
    lane while in flight is then left out of its new lane's index: claims find it in the due
    queue's order."""
    if lane == "normal":
        return ()
    return (lane,) if lane in MARKED else MARKED


@lru_cache(maxsize=256)
def member_keys(k: Keys, lane: str) -> tuple[str, ...]:
    """The member sets of ``member_lanes(lane)`` in shard ``k``: made once per shard and lane (every
    deferral and failure asks)."""
    return tuple(k.lane_members(x) for x in member_lanes(lane))


def add_args(k: Keys, items: Sequence[NewItem], readmit: bool, now: float, cap: int, lane: str | None,
             move: bool) -> tuple[list, list, list[int]]:
    """KEYS and ARGV of one add.lua call in shard ``k``, and per item the trackers cut here.

    An item's trackers beyond the per-torrent bound ``cap`` are not sent (the
    script could not store them anyway), so one hostile magnet cannot
    make a call huge; its name is sent clean and bounded (``torrent_names.clean``).
    """
    keys = [k.ready, k.cooling, k.leases, k.evicted, k.tombstones, k.quarantined, k.quarantine, k.expiries,
            *lane_keys(k), k.since]
    args: list = [repr(now), "1" if readmit else "0", cap, lane or "", "1" if move else "0"]
    cut: list[int] = []
    for item in items:
        name = clean(item.name) or ""
        if item.trackers or readmit or name:  # only these items' own keys are touched
            keys += (k.torrent(item.info_hash), k.trackers(item.info_hash), k.history(item.info_hash))
        trackers, n = item.trackers, 0
        if len(trackers) > cap:
            unique = tuple(dict.fromkeys(trackers))
            trackers, n = unique[:cap], max(0, len(unique) - cap)
        cut.append(n)
        args += (item.info_hash, name, str(len(trackers)), *trackers)
    return keys, args, cut


def added(batch: Sequence[NewItem], reply: list, cut: list[int],
          on_dropped: Callable[[NewItem, int], None] | None) -> list[str]:
    """Statuses of one add.lua reply; ``on_dropped(item, n)`` for trackers not stored."""
    letters, dropped = reply[0].decode(), reply[1]
    if on_dropped is not None:
        for i in range(0, len(dropped), 2):
            cut[int(dropped[i]) - 1] += int(dropped[i + 1])
        for item, n in zip(batch, cut):
            if n:
                on_dropped(item, n)
    return [ADD_STATUS[c] for c in letters]


def claim_args(k: Keys, settings: Settings, count: int, now: float, asked: int, sharded: bool) -> dict:
    """KEYS and ARGV of one claim.lua call in shard ``k``; ``asked``: the torrents the claim
    asked for, counted in this call's rates; ``sharded``: the queue has more than one shard."""
    return dict(
        keys=[k.ready, k.since, k.cooling, k.leases, k.evicted, k.tombstones, k.held, k.claims,
              k.expiries, k.quarantined, k.quarantine, k.rates, *lane_keys(k), k.lane_credit],
        args=[repr(now), repr(now + settings.lease_seconds), count,
              2 * count + 8 if count else HOUSEKEEPING_BUDGET, repr(now - settings.tombstone_seconds),
              settings.quarantine_after, minute(now), asked,
              repr(settings.lane_share), "1" if sharded else "0"],
    )


def leases(flat: list, now: float) -> list[Lease]:
    """The leases of a claim.lua reply (its last element, the shard's offer, left out)."""
    return [Lease(flat[i].decode(), float(flat[i + 1]), int(flat[i + 2]), now, flat[i + 3].decode())
            for i in range(0, len(flat) - 1, 4)]


class Completion(NamedTuple):
    """A visit to complete (``Queue.complete``'s arguments): ``due``, when the torrent may be visited
    again (None: now + revisit); ``reported``, the swarm size the sources reported (None: none did);
    ``new``, the IPs the visit counted for the first time (coverage); ``estimated``, the seeders and
    leechers are the DHT's estimates (BEP 33), not a tracker's counts; ``notes``, the visit's source
    notes as note.lua takes them (``VisitPlan.note_args``), None for none; ``sent``, when the
    completion leaves, which ends the visit's round trip (None: ``now``; a worker's ``now`` is when
    the sources answered, before the recording)."""

    lease: Lease
    result: Outcome
    now: float
    peers: int = 0
    seeders: int | None = None
    leechers: int | None = None
    due: float | None = None
    reported: int | None = None
    new: int = 0
    estimated: bool = False
    notes: list | None = None
    sent: float | None = None


def complete_args(k: Keys, settings: Settings, visits: Sequence[Completion]) -> dict:
    """KEYS and ARGV of the complete.lua call of ``visits``, each of a torrent of shard ``k``."""
    s = settings
    keys = list(_completion_keys(k))
    args: list = list(_completion_settings(s.evict_below, s.tombstone_seconds, s.torrent_history,
                                           s.evict_never_seen_seconds, s.evict_lost_seconds, s.multiplier_none))
    for c in visits:
        lease, now = c.lease, c.now
        due = now + s.revisit_seconds if c.due is None else c.due
        sent = now if c.sent is None else c.sent
        h = lease.info_hash
        at = minute(now)
        notes = c.notes or ("",)
        keys += (k.torrent(h), k.trackers(h), k.history(h), k.tracker_min_interval(h))
        args += (FIXED_ARGS + len(notes), h, lease.token, repr(multiplier(c.result, s)), repr(now), repr(due),
                 "" if c.seeders is None else c.seeders, "" if c.leechers is None else c.leechers, c.peers, at,
                 c.result.value, rt_field(at, sent - lease.claimed) if 0 < lease.claimed <= sent else "",
                 "" if c.reported is None else c.reported, c.new, int(now // 86400), "1" if c.estimated else "0",
                 _lane_digits(lease.lane), *notes)
    return dict(keys=keys, args=args)


# A visit's arguments in a complete.lua call before its notes (the script's FIXED).
FIXED_ARGS = 16
@lru_cache(maxsize=16)
def _lane_digits(lane: str) -> str:
    """``member_lanes(lane)`` as complete.lua takes them: digits of its KEYS[11..13] (``MARKED``'s order)."""
    return "".join(str(MARKED.index(x) + 1) for x in member_lanes(lane))


# What a completion's call takes of its shard's keys and of the settings is the same in every call:
# made once (building them again was half of the ~8.7 us a completion's arguments cost).
@lru_cache(maxsize=256)
def _completion_keys(k: Keys) -> tuple[str, ...]:
    """complete.lua's shard keys, in its order."""
    return (k.leases, k.held, k.claims, k.cooling, k.evicted, k.tombstones, k.visits, k.expiries, k.rates,
            k.atrisk, *(k.lane_members(x) for x in MARKED))


@lru_cache(maxsize=64)
def _completion_settings(threshold: float, tombstone: float, kept: int, never_seen: float, lost: float,
                         none: float) -> tuple:
    """complete.lua's arguments that come from the settings, as it takes them."""
    return repr(threshold), int(math.ceil(tombstone)), kept, repr(never_seen), repr(lost), repr(none)
