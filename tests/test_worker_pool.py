"""The pool in-process against a real opentracker and Redis: runners that complete
and claim in one round trip still stop at exactly ``--max-visits``, leave when the
autoscaler shrinks the pool, and hand back what they claimed as a stop came."""

from __future__ import annotations

import hashlib

import gevent
import pytest

from crawler.items import NewItem
from crawler.lifecycle import Queue
from crawler.queue_view import QueueView
from crawler.settings import TrackerSpec
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from workers.process import Process


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
    assert visits(q, hs) == 13 and p.worker.claimed == 13
    c = view.counts()
    assert (c["in_flight"], c["ready"], c["cooling"]) == (0, 40 - 13, 13)


def test_runners_leave_when_the_pool_shrinks(crawl, client, keys):
    s, hs = crawl
    seen_after: list[int] = []
    p = Process(s, client, keys, concurrency=8, until_idle=True, flush=False,
                on_visit=lambda v: on_visit(v))
    w = p.worker

    def on_visit(v) -> None:
        if w.health.visits == 8:
            w.target = 2  # what the autoscaler does
        elif w.health.visits > 8 + 8:  # every runner has finished the visit it had then
            seen_after.append(len(w.pool))

    assert p.run(signals=False) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    assert visits(q, hs) == 40 and view.counts()["in_flight"] == 0
    assert seen_after and max(seen_after) <= 2


def test_a_stop_hands_back_a_torrent_claimed_at_the_same_moment(crawl, client, keys):
    s, hs = crawl
    p = Process(s, client, keys, concurrency=3, until_idle=True, flush=False)
    w = p.worker
    real = w._next_count

    def next_count() -> int:
        n = real()
        if w.health.visits >= 5:
            w.stop()  # the stop arrives while this completion claims the next torrent
        return n

    w._next_count = next_count
    g = gevent.spawn(p.run, False)
    assert g.get(timeout=30) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    c = view.counts()
    done = visits(q, hs)
    assert c["in_flight"] == 0  # nothing left leased: claimed torrents went back to ready
    assert c["cooling"] == done and c["ready"] == 40 - done
