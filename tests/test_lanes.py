"""Lanes (contract §1; priority lanes with guaranteed shares for the lower ones): served in order, every lower lane its guaranteed share."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from crawler.queue.queue import Queue
from crawler.queue.resharding import Reshard
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.cli import run_json

T0 = 1_900_000_000.0


def hashes(lane: str, n: int) -> list[str]:
    return [hashlib.sha1(f"{lane}{i}".encode()).hexdigest() for i in range(n)]


def crawl(client, namespace, settings, shards: int, sizes: dict[str, int]):
    keys = layout.resolve(client, namespace, shards)
    q = Queue(client, keys, settings.replace(queue_shards=shards))
    lane_of = {}
    for lane, n in sizes.items():
        hs = hashes(lane, n)
        assert q.add([NewItem(h) for h in hs], lane=lane, now=T0) == ["added"] * n
        lane_of.update(dict.fromkeys(hs, lane))
    return q, QueueView(client, keys), lane_of


@pytest.mark.parametrize("shards", [1, 3])
def test_a_long_run_serves_lanes_in_order_with_every_lower_lane_its_share(client, namespace, settings, shards):
    q, view, lane_of = crawl(client, namespace, settings, shards, {"high": 300, "normal": 300, "low": 300})
    served: Counter = Counter()
    t = T0
    for i in range(1500):  # every torrent back at once: each lane always has ready torrents
        t += 1
        for lease in q.claim(1 + i % 4, now=t):
            served[lane_of[lease.info_hash]] += 1
            q.complete(lease, Outcome.SOME, peers=1, due=t, now=t)
    total = sum(served.values())
    share = settings.lane_share
    # every lane below the first is owed `share` of the claims; the first takes the rest
    for lane in ("normal", "low"):
        assert served[lane] >= share * total - 2 * shards, (served, total)
        assert served[lane] <= share * total + 2 * shards + 1, (served, total)
    assert served["high"] >= (1 - 2 * share) * total - 4 * shards - 2


def test_the_first_lane_wins_whatever_the_scores(client, namespace, settings):
    q, view, lane_of = crawl(client, namespace, settings, 1, {"low": 1, "high": 1})
    (lease,) = q.claim(1, now=T0)
    assert lane_of[lease.info_hash] == "high"
    q.complete(lease, Outcome.NONE, due=T0 + 10, now=T0)  # its score halves: 0.5 against 1.0
    (lease,) = q.claim(1, now=T0 + 2)
    assert lane_of[lease.info_hash] == "low"  # the high one still cools
    q.complete(lease, Outcome.SOME, peers=1, due=T0 + 3, now=T0 + 2)
    leases = q.claim(1, now=T0 + 11)  # both due again: the low one scores 0.8
    assert lane_of[leases[0].info_hash] == "high" and leases[0].score == 0.5


def test_an_empty_higher_lane_leaves_the_next_first(client, namespace, settings):
    q, view, lane_of = crawl(client, namespace, settings, 1, {"normal": 20, "discovered": 20})
    got = Counter(lane_of[x.info_hash] for x in q.claim(20, now=T0))
    # normal is first; discovered is owed a tenth
    assert got == {"normal": 18, "discovered": 2}


def test_add_lane_moves_tracked_torrents_and_discovery_does_not(client, namespace, settings):
    q, view, lane_of = crawl(client, namespace, settings, 1, {"normal": 3})
    a, b, c = hashes("normal", 3)
    q.claim(0, now=T0)  # housekeeping: all three now in normal's ready set
    assert q.add([NewItem(a)], lane="high", now=T0) == ["already_tracked"]
    assert view.lane(a) == "high"
    (lease,) = q.claim(1, now=T0 + 1)
    assert lease.info_hash == a
    assert q.add([NewItem(b), NewItem(hashes("d", 1)[0])], lane="discovered", move=False, now=T0) == [
        "already_tracked", "added"]
    assert view.lane(b) == "normal" and view.lane(hashes("d", 1)[0]) == "discovered"
    assert q.add([NewItem(a)], lane="normal", now=T0) == ["already_tracked"]  # moved back while in flight
    assert view.lane(a) == "normal"
    q.release(lease, now=T0 + 2)
    assert view.state(a, T0 + 2)[0] == "ready" and view.lane(a) == "normal"
    lanes = view.lanes(T0 + 2)
    assert lanes["normal"]["ready"] == 3 and lanes["discovered"]["ready"] == 1
    assert lanes["high"] == dict.fromkeys(("ready", "cooling", "in_flight", "quarantined", "evicted"), 0)


@pytest.mark.parametrize("shards", [1, 3])
def test_status_counts_every_state_per_lane(client, namespace, settings, test_env, shards):
    import time

    now = time.time()
    keys = layout.resolve(client, namespace, shards)
    q = Queue(client, keys, settings.replace(queue_shards=shards))
    for lane, n in (("high", 6), ("normal", 5), ("low", 4)):
        q.add([NewItem(h) for h in hashes(lane, n)], lane=lane, now=now)
    flying = q.claim(4, now=now)  # the high lane first; the lower lanes are owed 0.4 of a claim each
    cooled = q.claim(2, now=now)
    for lease in cooled:
        q.complete(lease, Outcome.SOME, peers=1, due=now + 3600, now=now)
    assert all(x.info_hash in hashes("high", 6) for x in flying + cooled)
    zero = dict.fromkeys(("ready", "cooling", "in_flight", "quarantined", "evicted"), 0)
    truth = {"high": {**zero, "in_flight": 4, "cooling": 2}, "normal": {**zero, "ready": 5},
             "low": {**zero, "ready": 4}, "discovered": zero}
    p, status = run_json(test_env, "status")
    assert p.returncode == 0, p.stderr
    assert status["lanes"] == truth
    assert (status["ready"], status["in_flight"], status["cooling"]) == (9, 4, 2)


def test_a_reshard_keeps_every_torrents_lane(client, namespace, settings):
    q, view, lane_of = crawl(client, namespace, settings, 1, {"high": 30, "low": 30, "discovered": 30})
    q.claim(0, now=T0)
    before = view.lanes(T0)
    Reshard(client, namespace, 4).run(T0)
    keys = layout.resolve(client, namespace, None)
    view = QueueView(client, keys)
    assert keys.shards == 4 and view.lanes(T0) == before
    assert all(view.lane(h) == lane for h, lane in lane_of.items())
    q = Queue(client, keys, settings.replace(queue_shards=4))
    assert Counter(lane_of[x.info_hash] for x in q.claim(10, now=T0 + 1))["high"] >= 8


def test_the_add_command_puts_torrents_in_a_lane_and_status_shows_it(namespace, test_env):
    from tests.cli import run

    high, normal = hashes("cli-high", 2), hashes("cli-normal", 1)
    p, out = run_json(test_env, "add", "--lane", "high", *high)
    assert p.returncode == 0 and out["added"] == 2
    assert run_json(test_env, "add", *normal)[1]["added"] == 1
    assert run_json(test_env, "torrent", high[0])[1]["lane"] == "high"
    assert run_json(test_env, "torrent", normal[0])[1]["lane"] == "normal"
    p, out = run_json(test_env, "add", "--lane", "low", high[1])  # moved
    assert out["already_tracked"] == 1 and run_json(test_env, "torrent", high[1])[1]["lane"] == "low"
    lanes = run_json(test_env, "status")[1]["lanes"]
    assert (lanes["high"]["ready"], lanes["normal"]["ready"], lanes["low"]["ready"]) == (1, 1, 1)
    text = run(test_env, "status").stdout
    assert "lanes" in text and "discovered" in text
    p = run(test_env, "add", "--lane", "discovered", normal[0])  # discovery's lane, not a user's
    assert p.returncode == 2 and "--lane" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("share", [0.0, 0.3])
def test_the_smallest_and_largest_shares(client, namespace, settings, share):
    s = settings.replace(lane_share=share)
    q, view, lane_of = crawl(client, namespace, s, 1, {"high": 50, "normal": 50, "low": 50, "discovered": 50})
    served: Counter = Counter()
    t = T0
    for _ in range(400):
        t += 1
        for lease in q.claim(1, now=t):
            served[lane_of[lease.info_hash]] += 1
            q.complete(lease, Outcome.SOME, peers=1, due=t, now=t)
    if share == 0.0:
        assert served == {"high": 400}  # strictly in order
    else:  # each lower lane its 0.3; the first keeps what is left, a tenth
        for lane in ("normal", "low", "discovered"):
            assert abs(served[lane] - 0.3 * 400) <= 2, served
        assert served["high"] >= 0.1 * 400 - 6, served
