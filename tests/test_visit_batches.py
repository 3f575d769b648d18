"""A runner's batch of visits (``Visitor.visit_many``) against a real opentracker and Redis: each
visit of a batch is settled as it would have been alone, whatever the others did."""

from __future__ import annotations

import hashlib
import time

import pytest

from crawler.counters.recorder import Recorder
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import free_port, opentracker, peer_address  # noqa: F401 (fixture)
from workers.visit import Visitor


def h(tag: str) -> str:
    return hashlib.sha1(tag.encode()).hexdigest()


def test_a_batch_settles_each_visit_as_alone_answered_failed_and_skipped(settings, client, keys, opentracker,  # noqa: F811
                                                                          tmp_path):
    answered, failed, skipped = h("batch-answered"), h("batch-failed"), h("batch-skipped")
    ot = opentracker([answered, skipped])
    for i in range(3):
        ot.announce_from(peer_address(i), answered, 6881)
    ot.announce_from(peer_address(5), skipped, 6881)  # a swarm with peers is announced to, not only scraped
    dead = f"udp://127.0.0.1:{free_port()}/announce"  # nothing listens: no answer
    s = settings.replace(revisit_seconds=1.0, visit_deadline=1.0, udp_timeout=0.3,
                         geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        # the HTTP tracker's min interval (minutes) holds ``skipped`` once visited
        q.add([NewItem(skipped, (ot.http_url,))])
        (lease,) = q.claim(1)
        assert v.visit(lease).state == "cooling"
        client.zadd(keys.cooling, {skipped: time.time() - 1})  # forced ready early, as after a restart
        q.add([NewItem(answered, (ot.udp_url,)), NewItem(failed, (dead,))])
        leases = q.claim(3)
        assert {lease.info_hash for lease in leases} == {answered, failed, skipped}
        asked: list[int] = []
        visits, nxt = v.visit_many(leases, lambda k: asked.append(k) or 0)
        got = {x.info_hash: x for x in visits}
        assert asked == [3] and nxt == []
        assert (got[answered].state, got[answered].peers, got[answered].new) == ("cooling", 3, 3)
        assert got[failed].state == "failed" and "127.0.0.1" in got[failed].error
        assert (got[skipped].state, got[skipped].asked) == ("skipped", 0)
        t = {ih: view.torrent(ih) for ih in (answered, failed, skipped)}
        assert (t[answered]["visits"], t[answered]["failed_visits"]) == (1, 0)
        assert (t[failed]["visits"], t[failed]["failed_visits"], t[failed]["state"]) == (0, 1, "cooling")
        assert (t[skipped]["visits"], t[skipped]["failed_visits"]) == (1, 0)
        assert view.counts()["in_flight"] == 0
    finally:
        trackers.close()


def test_a_visit_whose_lease_went_back_is_stale_alone_and_the_rest_of_its_batch_counts(  # noqa: F811
        settings, client, keys, opentracker, tmp_path):
    hs = [h(f"batch-stale-{i}") for i in range(4)]
    ot = opentracker(hs)
    for ih in hs:
        ot.announce_from(peer_address(1), ih, 6881)
    s = settings.replace(geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    q.add([NewItem(ih, (ot.udp_url,)) for ih in hs])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        leases = q.claim(4)
        stale = leases[2]
        q.release(stale)  # its lease is no longer held: its completion is refused, the others' are not
        visits, _ = v.visit_many(leases)
        ends = {lease.info_hash: x for lease, x in zip(leases, visits)}
        assert all(ends[lease.info_hash].state == "cooling" for lease in leases if lease is not stale)
        assert ends[stale.info_hash].state == "stale"
        view = QueueView(q.client, q.keys)
        assert sum(view.torrent(ih)["visits"] for ih in hs) == 3
    finally:
        trackers.close()


@pytest.mark.parametrize("n", [1, 2, 16])
def test_a_batch_of_revisits_counts_nothing_twice(settings, client, keys, opentracker, tmp_path, n):  # noqa: F811
    hs = [h(f"batch-revisit-{n}-{i}") for i in range(n)]
    ot = opentracker(hs)
    for ih in hs:
        for i in range(2):
            ot.announce_from(peer_address(i), ih, 6881)
    s = settings.replace(revisit_seconds=1.0, geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    q.add([NewItem(ih, (ot.udp_url,)) for ih in hs])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        first, _ = v.visit_many(q.claim(n))
        assert sorted(x.new for x in first) == [2] * n
        client.zadd(keys.cooling, {ih: time.time() - 1 for ih in hs})
        again, _ = v.visit_many(q.claim(n))
        assert [(x.state, x.peers, x.new) for x in again] == [("cooling", 2, 0)] * n
    finally:
        trackers.close()
