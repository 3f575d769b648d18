"""The queue in shards (contract §1, §9): the same torrents, the same order, one slot per script."""

from __future__ import annotations

import hashlib
import random

import pytest

from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.report.queue_report import queue_report
from crawler.shard_layout import MAX_SHARDS
from crawler.store import connect as store
from crawler.torrents.items import NewItem
from tests.test_cluster import SECRET, cluster_ns  # noqa: F401 (fixture)


def hashes(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def scored_queue(client, namespace, settings, shards: int, hs: list[str], t: float = 1000.0) -> Queue:
    """A queue of ``hs`` with varied scores, every one ready (housekeeping done)."""
    q = Queue(client, Keys(namespace, shards), settings)
    q.add([NewItem(h) for h in hs], now=t)
    rng = random.Random(7)
    leases = q.claim(len(hs), now=t)
    while len(leases) < len(hs):
        leases += q.claim(len(hs), now=t)
    outcomes = [Outcome.NONE, Outcome.SOME, Outcome.FULL]
    for lease in leases:
        q.complete(lease, rng.choice(outcomes), now=t, due=t + 1)
    while any(client.zcard(k.cooling) for k in q.keys.all_shards):
        q.housekeep(now=t + 2)
    return q


@pytest.mark.parametrize("shards", [1, 7])
def test_one_claimer_takes_scores_in_global_order(client, namespace, settings, shards):
    hs = hashes(400)
    q = scored_queue(client, namespace, settings, shards, hs)
    got = []
    while lease := q.claim(1, now=1003.0):
        got += lease
    assert sorted(l.info_hash for l in got) == sorted(hs)
    scores = [l.score for l in got]
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == 3  # the order was tested on different scores
    Queue(client, q.keys, settings)  # a fresh process sees the same, empty, queue
    assert QueueView(client, q.keys).counts(1003.0)["in_flight"] == 400


def test_claims_in_batches_across_shards_come_back_in_score_order(client, namespace, settings):
    hs = hashes(300)
    q = scored_queue(client, namespace, settings, 5, hs)
    batch = q.claim(120, now=1003.0)
    assert len(batch) == 120
    scores = [l.score for l in batch]
    assert scores == sorted(scores, reverse=True)
    rest = [q.claim(200, now=1003.0), q.claim(200, now=1003.0)]
    assert sorted(l.info_hash for part in [batch] + rest for l in part) == sorted(hs)


def test_the_largest_shard_count_holds_every_torrent_once(client, namespace, settings):
    hs = hashes(3000, "big")
    keys = Keys(namespace, MAX_SHARDS)
    q, view = Queue(client, keys, settings), QueueView(client, keys)
    assert q.add([NewItem(h) for h in hs], now=100) == ["added"] * 3000
    assert q.add([NewItem(h) for h in hs[:10]], now=100) == ["already_tracked"] * 10
    assert view.counts(100)["ready"] == 3000
    assert len({keys.for_torrent(h) for h in hs}) > 900  # spread over the shards
    leases = []
    while got := q.claim(500, now=101):
        leases += got
    assert sorted(l.info_hash for l in leases) == sorted(hs)
    for lease in leases[:1500]:
        assert q.complete(lease, Outcome.SOME, now=102)[0] == "cooling"
    for lease in leases[1500:]:
        assert q.fail(lease, "nobody answered", now=102)
    c = view.counts(102)
    assert (c["cooling"], c["ready"], c["in_flight"], c["tracked"]) == (3000, 0, 0, 3000)
    assert view.visits_since(3600, now=102) == 1500
    assert view.visits_since(3600, now=102, failed=True) == 1500
    assert view.torrent(hs[5], 102)["visits"] in (0, 1)
    minutes = (len({keys.for_torrent(l.info_hash) for l in leases[:1500]})
               + len({keys.for_torrent(l.info_hash) for l in leases[1500:]}))
    assert q.trim_visit_buckets(now=102 + 3 * 86400) == minutes
    report = queue_report(q, 103)
    assert report["shards"] == {"queue": MAX_SHARDS, "counters": MAX_SHARDS} and report["tracked"] == 3000


def test_two_claimers_never_share_a_torrent_and_expired_leases_come_back_from_any_shard(
        client, namespace, settings):
    hs = hashes(200, "two")
    keys = Keys(namespace, 6)
    a, b = Queue(client, keys, settings), Queue(client, keys, settings)
    a.add([NewItem(h) for h in hs], now=100)
    held = []
    for i in range(100):
        held += (a if i % 2 else b).claim(2, now=100)
    assert len(held) == 200 and len({l.info_hash for l in held}) == 200
    # nobody completes: the leases expire, and a new claimer (stale estimates:
    # the housekeeping of every shard) finds all of them again
    later = 100 + settings.lease_seconds + 1
    fresh = Queue(client, keys, settings)
    again = fresh.claim(500, now=later)
    assert sorted(l.info_hash for l in again) == sorted(hs)
    assert {l.token for l in again} == {2}


def test_what_this_process_puts_back_is_claimable_at_once(client, namespace, settings):
    keys = Keys(namespace, 4)
    q = Queue(client, keys, settings)
    (h,) = hashes(1, "back")
    q.add([NewItem(h)], now=100)
    (lease,) = q.claim(1, now=100)
    assert q.claim(1, now=100.1) == []  # its shard is known empty until the lease ends
    q.complete(lease, Outcome.FULL, now=100.2, due=100.3)
    (again,) = q.claim(1, now=100.4)  # within the estimate's age, yet found
    assert again.info_hash == h and again.score == pytest.approx(1.2)
    assert q.release(again, now=100.5)
    (third,) = q.claim(1, now=100.6)
    assert third.token == 3


@pytest.mark.interpreted
def test_plans_read_together_are_each_torrents_plan(client, namespace, settings):
    # 400 torrents over 3 shards (past the torrents one plan.lua call reads): own trackers or none,
    # notes or none, a set past the per-torrent bound; read together, each is what it reads alone
    from crawler.queue.visit_plan import PLAN_BATCH

    s = settings.replace(max_trackers_per_torrent=3)
    q = Queue(client, Keys(namespace, 3), s)
    hs = hashes(400, "plans")
    assert len(hs) > 3 * PLAN_BATCH
    own = {h: tuple(f"udp://127.0.0.{i % 5}:{j + 1}/announce" for j in range(i % 3)) for i, h in enumerate(hs)}
    own[hs[0]] = tuple(f"udp://127.0.0.1:{j + 1}/announce" for j in range(9))  # past the bound
    q.add([NewItem(h, own[h]) for h in hs], now=100)
    for h in hs[::4]:
        q.hold_trackers(h, {"udp://127.0.0.9:1/announce": 500.0}, 60)
    many = q.plans.plans(hs)
    for h, p in zip(hs[1:], many[1:]):
        alone = q.plan(h)
        assert (sorted(p.own), p.raw_notes, p.fetch_from) == (sorted(alone.own), alone.raw_notes, alone.fetch_from)
        assert sorted(p.own) == sorted(own[h])
    assert len(many[0].own) == 3 and set(many[0].own) <= set(own[hs[0]])
    assert q.plans.plans([]) == []
    # a call answers at most PLAN_TRACKERS trackers: at the largest bound, a torrent a call, as alone
    for bound, most in ((3, PLAN_BATCH), (10_000, 1)):
        wide = Queue(client, Keys(namespace, 3), settings.replace(max_trackers_per_torrent=bound))
        sent: list[int] = []
        run = wide.plans.store.run

        def noting(calls, wait=None, sent=sent, run=run, **options):
            sent.extend(len(keys) // 3 for _, keys, _ in calls)
            return run(calls, wait, **options)

        wide.plans.store.run = noting
        assert [p.raw_notes for p in wide.plans.plans(hs)] == [p.raw_notes for p in many]
        assert max(sent) == most and sum(sent) == len(hs)


def test_a_sharded_queue_on_the_cluster_touches_one_slot_per_script(cluster_ns, settings):  # noqa: F811
    ns, url = cluster_ns
    s = settings.replace(redis_url=url, namespace=ns, secret=SECRET)
    client = store.connect(s)
    keys = Keys(ns, 6)
    q, view = Queue(client, keys, s), QueueView(client, keys)
    hs = hashes(120, "cluster")
    assert q.add([NewItem(h, ("udp://127.0.0.1:1/announce",)) for h in hs], now=100) == ["added"] * 120
    leases = []
    while got := q.claim(25, now=101):
        leases += got
    assert sorted(l.info_hash for l in leases) == sorted(hs)
    for i, lease in enumerate(leases):
        assert q.plan(lease.info_hash)[0] == ["udp://127.0.0.1:1/announce"]
        q.hold_trackers(lease.info_hash, {"udp://127.0.0.1:1/announce": 500.0}, 60)
        assert q.extend(lease, now=101)
        if i % 3 == 0:
            assert q.release(lease, now=102)
        elif i % 3 == 1:
            assert q.complete(lease, Outcome.SOME, now=102)[0] == "cooling"
        else:
            assert q.fail(lease, "down", now=102)
    # every torrent's plan in one round trip, a plan.lua call a shard
    many = q.plans.plans(hs)
    assert [p.own for p in many] == [["udp://127.0.0.1:1/announce"]] * 120
    assert all(p.notes.not_before == {"udp://127.0.0.1:1/announce": 500.0} for p in many)
    c = view.counts(102)
    assert (c["ready"], c["cooling"], c["in_flight"]) == (40, 80, 0)
    assert view.visits_since(3600, now=102) == 40 and view.next_due(102) == 0.0
    assert view.torrent(hs[0], 102)["tracker_not_before"] == {"udp://127.0.0.1:1/announce": 500.0}
    q.trim_visit_buckets(now=102)
    client.close()
