"""Lanes served in order behind a backlog of due torrents (contract §1 lanes), on the real Redis.

Claims move due torrents into ready oldest first, a few per claim, so one
lane's due torrents can sit behind another lane's backlog in the due queue.
These tests put a small lane (fewer torrents than one claim) behind a large
low one, in every way a torrent becomes due (added, visited, failed,
deferred), and check claim by claim that no low torrent is taken beyond the
low lane's share while the higher lane has ready or due torrents.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from crawler.queue.lanes import MARKED
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.store import layout
from crawler.torrents.items import NewItem

T0 = 1_900_000_000.0
SMALL = 5
LANES = ["high", "normal", "low", "discovered"]


def hashes(lane: str, n: int) -> list[str]:
    return [hashlib.sha1(f"backlog-{lane}{i}".encode()).hexdigest() for i in range(n)]


def ready_in_lane(client, q: Queue, lane: str, hs: list[str], now: float) -> int:
    """How many of ``hs`` (all of ``lane``) are ready as ``status`` counts them: in the lane's ready
    set, cooling and due, or in flight past their lease."""
    by_shard: dict = {}
    for h in hs:
        by_shard.setdefault(q.keys.for_torrent(h), []).append(h)
    n = 0
    for k, part in by_shard.items():
        n += sum(x is not None for x in client.zmscore(k.ready_in(lane), part))
        for key in (k.cooling, k.leases):
            n += sum(1 for x in client.zmscore(key, part) if x is not None and x <= now)
    return n


class Ledger:
    """Claims checked one by one against the lane credit (``PEERCRAWL_LANE_SHARE``).

    The low lane earns at most ``share`` of a claim per torrent claimed, and a
    low torrent taken while a higher lane has ready torrents must be paid for
    with a whole claim of that credit. A claim after which the higher lane
    (``upper``, torrents ``hs``) still has ready torrents made every pick while
    it had some: its low picks are at most the credit it spent. A claim that
    emptied that lane must have taken every one it had (nobody else claims
    here); its low picks may have come after, as the first non-empty lane's.
    """

    def __init__(self, client, q: Queue, lane_of: dict[str, str], share: float, upper: str = "high"):
        self.client, self.q, self.lane_of, self.share, self.upper = client, q, lane_of, share, upper
        self.hs = [h for h, lane in lane_of.items() if lane == upper]
        self.during = self.upper_taken = 0

    def owed(self) -> float:
        """The low lane's credit, summed over the shards."""
        return sum(float(self.client.hget(k.lane_credit, "low") or 0) for k in self.q.keys.all_shards)

    def ready(self, now: float) -> int:
        return ready_in_lane(self.client, self.q, self.upper, self.hs, now)

    def claim(self, n: int, now: float) -> list:
        before, owed = self.ready(now), self.owed()
        leases = self.q.claim(n, now=now)
        after, left = self.ready(now), self.owed()
        lanes = [self.lane_of[x.info_hash] for x in leases]
        upper, low = lanes.count(self.upper), lanes.count("low")
        self.upper_taken += upper
        assert -1e-9 <= left <= owed + self.share * len(leases) + 1e-9, (owed, left, lanes)
        if after > 0:
            self.during += len(leases)
            assert low <= owed + self.share * len(leases) - left + 1e-9, (before, after, owed, left, lanes)
        elif before > 0:
            assert upper == before, (upper, before, lanes)
        return leases


def make_queue(client, namespace, settings, shards: int) -> Queue:
    keys = layout.resolve(client, namespace, shards)
    return Queue(client, keys, settings.replace(queue_shards=shards))


def admit(q: Queue, low: list[str], upper: list[str], way: str, lane: str = "high") -> float:
    """The low lane, then ``upper`` in ``lane``, due in that order (low first) by ``way``; returns
    the time at which all are due."""
    q.add([NewItem(h) for h in low], lane="low", now=T0)
    q.add([NewItem(h) for h in upper], lane=None if lane == "normal" else lane, now=T0 + 1)
    if way == "added":
        return T0 + 2
    # visit every torrent once, then put it back due: the low ones first
    leases = []
    while got := q.claim(2000, now=T0 + 2):
        leases += got
    assert len(leases) == len(low) + len(upper)
    for lease in leases:
        due = T0 + 10 if lease.info_hash in low else T0 + 11
        if way == "completed":
            assert q.complete(lease, Outcome.NONE, due=due, now=T0 + 3)[0] == "cooling"
        elif way == "failed":
            assert q.fail(lease, "nobody answered", now=T0 + 3, due=due)
        else:
            assert q.defer(lease, due)
    return T0 + 12


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("n", [1, 8, 64])
@pytest.mark.parametrize(("upper", "way"), [("high", "added"), ("high", "completed"), ("high", "failed"),
                                            ("high", "deferred"), ("normal", "added")])
def test_a_small_lane_due_behind_a_low_backlog_is_served_first(client, namespace, settings, upper, way, n, shards):
    # more low torrents per shard than a claim's housekeeping moves (and than a peek's 200)
    low, small = hashes("low", 400 * shards), hashes(upper, SMALL)
    q = make_queue(client, namespace, settings, shards)
    lane_of = {**dict.fromkeys(low, "low"), **dict.fromkeys(small, upper)}
    t = admit(q, low, small, way, upper)
    ledger = Ledger(client, q, lane_of, settings.lane_share, upper)
    visited = []
    for _ in range(3 + 24 // n):
        t += 2  # past the shard estimates' age: each claim sees every shard afresh
        for lease in ledger.claim(n, t):
            visited.append(lease.info_hash)
            q.complete(lease, Outcome.NONE, due=t + 3600, now=t)
    assert ledger.upper_taken == SMALL and set(small) <= set(visited)
    # claims smaller than the small lane made picks while it had ready torrents; a larger one
    # took it whole (the ledger checks that)
    assert ledger.during > 0 or n >= SMALL


@pytest.mark.parametrize("shards", [1, 3])
def test_lanes_stay_in_order_while_the_low_lane_keeps_a_due_backlog(client, namespace, settings, shards):
    # Every torrent comes back due soon after its visit, the low lane's sooner, so the due queue
    # keeps low torrents ahead of high ones, beginning with a backlog of all of them.
    low, high = hashes("low", 400 * shards), hashes("high", 6)
    q = make_queue(client, namespace, settings, shards)
    lane_of = {**dict.fromkeys(low, "low"), **dict.fromkeys(high, "high")}
    t = admit(q, low, high, "completed")
    ledger = Ledger(client, q, lane_of, settings.lane_share)
    rng = random.Random(5)
    for i in range(150):
        t += 2
        for lease in ledger.claim(1 + i % 9, t):
            back = 1 if lane_of[lease.info_hash] == "low" else 3
            q.complete(lease, rng.choice([Outcome.SOME, Outcome.FULL]), peers=1, due=t + back, now=t)
    assert ledger.during > 50  # many picks were made while the high lane had ready torrents


def member_scores(client, q: Queue, h: str) -> dict[str, float]:
    k = q.keys.for_torrent(h)
    return {lane: s for lane in MARKED if (s := client.zscore(k.lane_members(lane), h)) is not None}


def test_a_lanes_member_set_holds_the_due_time_of_each_torrent_while_it_cools(client, namespace, settings):
    q = make_queue(client, namespace, settings, 1)
    a, b = hashes("index", 2)
    q.add([NewItem(a)], lane="high", now=T0)
    # new in a lane other than normal: ready at once, not in the due queue
    assert member_scores(client, q, a) == {"high": 0}
    assert client.zscore(q.keys.ready_in("high"), a) == 1.0 and client.zscore(q.keys.since, a) == T0
    assert client.zscore(q.keys.cooling, a) is None
    (lease,) = q.claim(1, now=T0 + 1)
    assert member_scores(client, q, a) == {"high": 0}
    q.complete(lease, Outcome.SOME, peers=1, due=T0 + 100, now=T0 + 1)
    assert member_scores(client, q, a) == {"high": T0 + 100}
    assert q.add([NewItem(a)], lane="low", now=T0 + 2) == ["already_tracked"]  # moved while cooling
    assert member_scores(client, q, a) == {"low": T0 + 100}
    (lease,) = q.claim(1, now=T0 + 100)
    q.fail(lease, "nobody answered", now=T0 + 100, due=T0 + 160)
    assert member_scores(client, q, a) == {"low": T0 + 160}
    (lease,) = q.claim(1, now=T0 + 160)
    q.defer(lease, T0 + 200)
    assert member_scores(client, q, a) == {"low": T0 + 200}
    (lease,) = q.claim(1, now=T0 + 200)
    assert q.add([NewItem(a)], lane="high", now=T0 + 201) == ["already_tracked"]  # moved while in flight
    assert member_scores(client, q, a) == {"high": 0}
    assert q.release(lease, now=T0 + 202)
    assert member_scores(client, q, a) == {"high": 0}  # ready
    # evicted, then re-admitted in its lane: due at once again
    s = settings.replace(evict_below=0.9)
    evicting = Queue(client, q.keys, s)
    (lease,) = evicting.claim(1, now=T0 + 203)
    assert evicting.complete(lease, Outcome.NONE, now=T0 + 203)[0] == "evicted"
    assert member_scores(client, q, a) == {"high": 0}
    assert q.add([NewItem(a)], readmit=True, now=T0 + 204) == ["added"]
    assert member_scores(client, q, a) == {"high": T0 + 204}  # re-admitted: due at once
    # a normal torrent is in no member set, whatever happens to it
    q.add([NewItem(b)], now=T0)
    got = q.claim(2, now=T0 + 205)
    for lease in got:
        q.complete(lease, Outcome.SOME, peers=1, due=T0 + 300, now=T0 + 205)
    assert member_scores(client, q, b) == {}


def test_a_wrong_index_entry_is_put_right_and_a_torrent_missing_from_it_is_still_found(
        client, namespace, settings):
    q = make_queue(client, namespace, settings, 1)
    k = q.keys
    low, high = hashes("fix-low", 100), hashes("fix-high", 3)
    q.add([NewItem(h) for h in low], lane="low", now=T0)
    q.add([NewItem(h) for h in high], lane="high", now=T0)
    leases = q.claim(2000, now=T0)
    stray = low[7]
    for lease in leases:  # back due: the low ones first, more than a claim of 1 moves
        if lease.info_hash == stray:
            q.release(lease, now=T0)
        else:
            q.complete(lease, Outcome.SOME, peers=1, due=T0 + (10 if lease.info_hash in low else 11), now=T0)
    # high[0] cools with no index entry; high[1] is indexed as due but cools until T0 + 50; the
    # ready stray is indexed as due
    client.zadd(k.lane_members("high"), {high[0]: 0})
    client.zadd(k.cooling, {high[1]: T0 + 50})
    client.zadd(k.lane_members("low"), {stray: T0 - 9})
    (lease,) = q.claim(1, now=T0 + 12)
    assert lease.info_hash == high[2]  # found through the index, past 99 due low torrents
    assert client.zscore(k.lane_members("high"), high[1]) == T0 + 50  # put right: still cooling
    assert client.zscore(k.lane_members("low"), stray) == 0  # put right: it is ready
    assert client.zscore(k.cooling, high[1]) == T0 + 50 and client.zscore(k.ready_in("low"), stray) is not None
    got = []
    while part := q.claim(1, now=T0 + 60):
        got += part
    assert got[0].info_hash == high[1]  # due now, through its put-right entry
    # the unindexed one is found in due order; nothing lost, nothing twice
    assert sorted(x.info_hash for x in got) == sorted(low + high[:2])


def check_index(client, q: Queue, hs: list[str], moved_in_flight: set[str]) -> None:
    """Each of ``hs`` in one state set at most and one member set at most, with its due time there
    while it cools and 0 otherwise (0 also allowed for one moved to another lane while in flight)."""
    p = client.pipeline(transaction=False)
    for h in hs:
        k = q.keys.for_torrent(h)
        for key in (*[k.ready_in(x) for x in LANES], k.cooling, k.leases, k.evicted, k.quarantined,
                    *[k.lane_members(x) for x in MARKED]):
            p.zscore(key, h)
    got = p.execute()
    width = len(LANES) + 4 + len(MARKED)
    for i, h in enumerate(hs):
        row = got[i * width:(i + 1) * width]
        states, cools = [x for x in row[:len(LANES) + 4] if x is not None], row[len(LANES)]
        marks = [x for x in row[len(LANES) + 4:] if x is not None]
        assert len(states) <= 1 and len(marks) <= 1, (h, row)
        for score in marks:
            if cools is None or h in moved_in_flight:
                assert score in (0, cools), (h, score, cools)
            else:
                assert score == cools, (h, score, cools)


def settle(q: Queue, lease, rng: random.Random, t: float) -> None:
    """End ``lease`` one of the four ways a worker does."""
    how = rng.random()
    if how < 0.5:
        q.complete(lease, rng.choice(list(Outcome)), peers=1, due=t + rng.choice([0, 2, 40]), now=t)
    elif how < 0.7:
        q.fail(lease, "nobody answered", now=t, due=t + rng.choice([0, 3]))
    elif how < 0.85:
        q.defer(lease, t + rng.choice([0, 7]))
    else:
        q.release(lease, now=t)


@pytest.mark.parametrize("shards", [1, 3])
def test_the_due_index_follows_every_torrent_through_random_operations(client, namespace, settings, shards):
    s = settings.replace(evict_below=0.3, quarantine_after=2, queue_shards=shards)
    q = make_queue(client, namespace, s, shards)
    rng = random.Random(11 + shards)
    hs = hashes("random", 60)
    t = T0
    held: dict[str, object] = {}  # info-hash -> its lease
    moved_in_flight: set[str] = set()  # left out of their new lane's index until claimed again
    for _ in range(400):
        t += rng.choice([0, 1, 5, 30])
        op = rng.random()
        if op < 0.2:  # add, re-admit, move between lanes
            part = rng.sample(hs, rng.randint(1, 8))
            q.add([NewItem(h) for h in part], lane=rng.choice(LANES + [None]), readmit=rng.random() < 0.3,
                  now=t, move=rng.random() < 0.7)
            moved_in_flight |= {h for h in part if h in held}
        elif op < 0.5:  # claim, now and then after every lease ran out
            if rng.random() < 0.1:
                t += s.lease_seconds + 1
                held.clear()
            for lease in q.claim(rng.choice([1, 2, 8, 64]), now=t):
                held[lease.info_hash] = lease
                moved_in_flight.discard(lease.info_hash)
        elif held:
            settle(q, held.pop(rng.choice(sorted(held))), rng, t)
        check_index(client, q, hs, moved_in_flight)
