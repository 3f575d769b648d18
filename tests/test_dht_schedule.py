"""The DHT's widening schedule and budget: a real libtorrent swarm on loopback, a real opentracker, a real Redis.

Torrent A has three peers on the DHT (none on the tracker); C has nobody
anywhere. A is looked up on every visit; C's lookups are spaced out once K
lookups in a row found nobody, and ``torrent --json`` says so.
"""

from __future__ import annotations

import time

import gevent
import pytest

from crawler.counters.recorder import Recorder
from crawler.queue.queue import Queue
from crawler.queue.source_notes import DHT_CODES, TRACKER_CODES
from crawler.queue.view import QueueView
from crawler.sources.dht import dht_schedule
from crawler.sources.dht.dht import DhtSource
from crawler.sources.rate_budget import RateBudget
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests.dht_swarm import HASH_A as A
from tests.dht_swarm import HASH_C as C
from tests.dht_swarm import dht_swarm  # noqa: F401 (the shared fixture)
from tests.mmdb import write_city_db
from tests.opentracker import opentracker  # noqa: F401 (fixture)
from workers.visit import Visitor

pytestmark = pytest.mark.slow


def test_the_schedule_widens_after_k_empty_lookups_and_resets_on_peers():
    after = dht_schedule.after_lookup
    # below K empty lookups in a row: looked up on the next visit
    assert after(False, 0, 1000.0, 60.0, 3) == (1, 0.0)
    assert after(False, 1, 1000.0, 60.0, 3) == (2, 0.0)
    # the K-th: the next lookup waits 2 revisits, then 4, 8 ...
    assert after(False, 2, 1000.0, 60.0, 3) == (3, 1000.0 + 120.0)
    assert after(False, 3, 1000.0, 60.0, 3) == (4, 1000.0 + 240.0)
    # at most a day (or one revisit interval when that is longer)
    assert after(False, 40, 1000.0, 60.0, 3) == (41, 1000.0 + dht_schedule.MAX_WAIT)
    assert after(False, 10**6, 1000.0, 60.0, 3) == (10**6 + 1, 1000.0 + dht_schedule.MAX_WAIT)
    assert after(False, 5, 0.0, 7 * 86_400.0, 1) == (6, 7 * 86_400.0)
    # peers found: every visit again, whatever came before
    assert after(True, 500, 1000.0, 60.0, 3) == (0, 0.0)
    # 0: every visit; the largest K the setting allows still counts up to it
    assert after(False, 99, 1000.0, 60.0, 0) == (100, 0.0)
    assert after(False, 998, 1000.0, 60.0, 1000) == (999, 0.0)
    assert after(False, 999, 1000.0, 60.0, 1000) == (1000, 1000.0 + 120.0)


@pytest.fixture
def world(dht_swarm, opentracker, settings, client, keys, tmp_path):  # noqa: F811
    ot = opentracker([A, C])
    s = settings.replace(trackers=(), revisit_seconds=1.0, dht_empty_visits=2, dht_timeout=8.0, dht_settle=0.5,
                         dht_bootstrap=tuple(dht_swarm.endpoints[:3]), dht_listen=(("127.0.0.3", 0),),
                         geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    q.add([NewItem(A, (ot.udp_url,)), NewItem(C, (ot.udp_url,))])
    dht = DhtSource(s)
    trackers = Trackers(s, client, keys)
    yield ot, s, q, dht, trackers
    trackers.close()
    dht.close()


def _visit(q, visitor, client, keys, h):
    """Visit ``h`` now, whatever its due time (as after a restart)."""
    client.zadd(keys.cooling, {h: time.time() - 1})
    leases = [lease for lease in q.claim(2) if lease.info_hash == h]
    assert leases, h
    for other in q.claim(2):
        q.release(other)
    return visitor.visit(leases[0])


def test_a_dht_only_swarm_is_looked_up_every_visit_and_an_empty_one_less_and_less(world, dht_swarm, client,  # noqa: F811
                                                                                keys):
    ot, s, q, dht, trackers = world
    view = QueueView(client, keys)
    visitor = Visitor(q, keys, s, trackers, Recorder(client, keys, s), dht=dht)
    looked = {"a": DHT_CODES["a"], "k": DHT_CODES["k"]}
    for i in range(4):
        v = _visit(q, visitor, client, keys, A)
        t = view.torrent(A, defaults=())
        assert v.peers == 3 and t["last_visit_sources"]["dht"] == looked["a"], (i, t)
        assert t["dht_schedule"] == {"empty_lookups_in_a_row": 0, "next_lookup": None}
        # the tracker knows no peer of A: scraped, not announced
        assert t["last_visit_sources"]["trackers"] == {ot.udp_url: TRACKER_CODES["s"]}
    codes = []
    for _ in range(2):  # K = 2 lookups that find nobody
        _visit(q, visitor, client, keys, C)
        codes.append(view.torrent(C)["last_visit_sources"]["dht"])
    t = view.torrent(C)
    assert codes == [looked["a"]] * 2
    assert t["dht_schedule"]["empty_lookups_in_a_row"] == 2
    first_wait = t["dht_schedule"]["next_lookup"] - t["last_visit"]
    assert first_wait == pytest.approx(2 * s.revisit_seconds, abs=0.01)
    # the next visits before then skip the DHT and score on the tracker that was asked
    v = _visit(q, visitor, client, keys, C)
    t = view.torrent(C)
    assert t["last_visit_sources"]["dht"] == looked["k"] and v.asked == 1 and v.state == "cooling"
    assert t["dht_schedule"]["empty_lookups_in_a_row"] == 2
    gevent.sleep(max(0.0, t["dht_schedule"]["next_lookup"] - time.time()) + 0.05)
    _visit(q, visitor, client, keys, C)
    t = view.torrent(C)
    assert t["last_visit_sources"]["dht"] == looked["a"]
    assert t["dht_schedule"]["empty_lookups_in_a_row"] == 3
    assert t["dht_schedule"]["next_lookup"] - t["last_visit"] == pytest.approx(4 * s.revisit_seconds, abs=0.01)


def test_the_dht_budget_spaces_lookups_across_the_namespace(world, client, keys):
    ot, s, q, dht, trackers = world
    rate, n = 4.0, 9
    s = s.replace(max_dht_lookups_per_second=rate, dht_empty_visits=0)
    hashes = ["%040x" % (5 * 10**11 + i) for i in range(n)]
    q.add([NewItem(h, ()) for h in hashes])
    started: list[float] = []

    class Timed:
        """The swarm's DHT source, with when each lookup began."""

        def lookup(self, h):
            started.append(time.monotonic())
            return dht.lookup(h)

    # two visitors with their own budgets: two workers of one namespace
    visitors = [Visitor(q, keys, s, trackers, Recorder(client, keys, s), dht=Timed(),
                        dht_budget=RateBudget.dht(client, keys, s)) for _ in range(2)]
    leases = [lease for lease in q.claim(n + 2) if lease.info_hash in hashes]
    assert len(leases) == n
    jobs = [gevent.spawn(visitors[i % 2].visit, lease) for i, lease in enumerate(leases)]
    gevent.joinall(jobs, raise_error=True)
    started.sort()
    gaps = [b - a for a, b in zip(started, started[1:])]
    # evenly spaced at the budget's interval (a late greenlet only widens a gap)
    assert len(started) == n and min(gaps) >= 1 / rate - 0.02, gaps
    # the budget's figures count every lookup it granted (this minute and the one before)
    minute = int(time.time()) // 60
    assert sum(int(client.hget(keys.budget_minute("dht", m), "sent") or 0) for m in (minute - 1, minute)) == n
