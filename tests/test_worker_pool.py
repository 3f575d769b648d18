"""The pool in-process against a real opentracker and Redis: runners that complete
and claim in one round trip still stop at exactly ``--max-visits``, leave when the
autoscaler shrinks the pool, and hand back what they claimed as a stop came. Then
the slots' bookkeeping alone, turn by turn."""

from __future__ import annotations

import hashlib

import gevent
import pytest

from crawler.queue.queue import Lease, Queue
from crawler.queue.view import QueueView
from crawler.source_settings import TrackerSpec
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from workers.process import Process
from workers.slots import CLAIM, LEAVE, Slots


def hashes(tag: str, n: int) -> list[str]:
    return [hashlib.sha1(f"{tag}-{i}".encode()).hexdigest() for i in range(n)]


@pytest.fixture
def crawl(settings, client, keys, opentracker, tmp_path):  # noqa: F811 (fixture)
    """(settings, torrents): opentracker with two peers in each of 40 swarms, all queued."""
    hs = hashes("pool", 40)
    ot = opentracker(hs)
    for h in hs:
        for i in range(2):
            ot.announce_from(peer_address(i), h, 6881)
    s = settings.replace(trackers=(TrackerSpec(ot.udp_url, 200),), geoip_db=write_city_db(tmp_path / "c.mmdb"))
    Queue(client, keys, s).add([NewItem(h) for h in hs])
    return s, hs


def visits(q: Queue, hs: list[str]) -> int:
    view = QueueView(q.client, q.keys)
    return sum(view.torrent(h)["visits"] for h in hs)


def test_max_visits_is_exact_when_runners_claim_as_they_complete(crawl, client, keys):
    s, hs = crawl
    p = Process(s, client, keys, concurrency=4, max_visits=13, flush=False)
    assert p.run(signals=False) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    assert visits(q, hs) == 13 and p.worker.slots.claimed == 13
    c = view.counts()
    assert (c["in_flight"], c["ready"], c["cooling"]) == (0, 40 - 13, 13)


@pytest.mark.parametrize("concurrency, limit", [(20, 33), (40, 40), (17, 1)])
def test_max_visits_is_exact_when_runners_visit_batches(crawl, client, keys, concurrency, limit):
    # pools of more slots than a runner's batch: several runners, a last one with a short batch
    s, hs = crawl
    p = Process(s, client, keys, concurrency=concurrency, max_visits=limit, flush=False)
    assert p.run(signals=False) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    assert visits(q, hs) == limit and p.worker.slots.claimed == limit
    assert not p.worker.slots.held and p.worker.slots.leaving == 0
    c = view.counts()
    assert (c["in_flight"], c["ready"], c["cooling"]) == (0, 40 - limit, limit)


def test_runners_leave_when_the_pool_shrinks(crawl, client, keys):
    s, hs = crawl
    seen_after: list[int] = []
    p = Process(s, client, keys, concurrency=8, until_idle=True, flush=False,
                on_visit=lambda v: on_visit(v))
    w = p.worker

    def on_visit(v) -> None:
        if w.health.visits == 8:
            w.slots.target = 2  # what the autoscaler does
        elif w.health.visits > 8 + 8:  # every runner has finished the visit it had then
            # A runner told to leave reports its last visit before it lets its
            # slot go (and the claim loop may already refill that slot): the
            # pool's size is the runners that go on.
            seen_after.append(w.slots.running - w.slots.leaving)

    assert p.run(signals=False) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    assert visits(q, hs) == 40 and view.counts()["in_flight"] == 0
    assert seen_after and max(seen_after) <= 2


@pytest.mark.interpreted
def test_a_stop_hands_back_a_torrent_claimed_at_the_same_moment(crawl, client, keys):
    s, hs = crawl
    p = Process(s, client, keys, concurrency=3, until_idle=True, flush=False)
    w = p.worker
    w.visitor = w.runners.visitor = StopWhileClaiming(w.visitor, w, after=5)
    g = gevent.spawn(p.run, False)
    assert g.get(timeout=30) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    c = view.counts()
    done = visits(q, hs)
    assert c["in_flight"] == 0  # nothing left leased: claimed torrents went back to ready
    assert c["cooling"] == done and c["ready"] == 40 - done
    assert w.visitor.stopped


class StopWhileClaiming:
    """The worker's visitor, stopping ``worker`` once ``after`` visits were counted, at the
    moment a completing runner has reserved its next claim and before the claim is sent."""

    def __init__(self, visitor, worker, after: int):
        self.visitor, self.worker, self.after = visitor, worker, after
        # what the worker logs as it stops
        self.stages, self.recorder, self.completions = visitor.stages, visitor.recorder, visitor.completions
        self.stopped = False

    def visit_many(self, leases, claim=None, split=None):
        def reserve_then_stop(k: int) -> int:
            n = claim(k)
            if self.worker.health.visits >= self.after:
                self.stopped = True
                self.worker.stop()
            return n

        return self.visitor.visit_many(leases, reserve_then_stop if claim is not None else None, split)


def _lease(name: str) -> Lease:
    return Lease(info_hash=name, score=1.0, token=0)


def test_slots_count_each_claim_once_and_stop_at_the_limit():
    s = Slots(target=2, limit=3)
    assert s.free() == 2
    s.start("a", _lease("a"))
    s.start("b", _lease("b"))
    assert (s.claimed, s.running, s.free()) == (2, 2, 0)
    assert s.reserve("a") == CLAIM  # the third and last claim, reserved before it is sent
    assert s.reserve("b") == LEAVE and s.exhausted()  # b completes meanwhile: nothing left for it
    s.answered("b", [])
    s.release("b")
    assert (s.claimed, s.running, s.leaving) == (3, 1, 0)
    s.answered("a", [_lease("c")])
    s.hold("a", _lease("c"))
    assert s.reserve("a") == LEAVE
    s.release("a")
    assert (s.claimed, s.running, s.leaving, s.free()) == (3, 0, 0, 0)


def test_slots_give_back_a_reserved_claim_that_brought_nothing_or_was_handed_back():
    s = Slots(target=1, limit=2)
    s.start("a", _lease("a"))
    assert s.reserve("a") == CLAIM and s.claimed == 2
    s.answered("a", [])  # nothing was ready
    assert s.claimed == 1 and not s.exhausted()
    s.hold("a", _lease("a2"))
    assert s.reserve("a") == CLAIM
    s.answered("a", [_lease("b")])  # claimed just as the stop came: handed back, never visited
    s.release("a")
    assert (s.claimed, s.running, s.free()) == (1, 0, 1)


def test_slots_let_runners_leave_when_the_target_shrinks_or_the_worker_stops():
    s = Slots(target=3)
    for r in "abc":
        s.start(r, _lease(r))
    s.target = 1
    assert s.reserve("a") == LEAVE  # 3 running, 1 wanted: a leaves
    assert s.free() == -1 and s.leaving == 1
    assert s.reserve("b") == LEAVE  # 2 not leaving, 1 wanted: b leaves too
    assert s.reserve("c") == CLAIM  # c is the one left
    s.release("a")
    s.release("b")
    assert (s.running, s.leaving, s.free()) == (1, 0, 0)
    s.hold("c", _lease("d"))
    assert s.reserve("c", claiming=False) == LEAVE  # the worker stops
    assert s.free() == 1 and s.claimed == 4
