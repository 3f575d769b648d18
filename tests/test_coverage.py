"""Coverage (crawler/queue/coverage.py): how much of a swarm the counts cover, per torrent and over the catalogue.

A real opentracker holds a swarm of 500 peers and answers at most 200 a
reply; three visits by a real worker each count 200 of them, so each
visit's coverage is 200 / 500, while the torrent's 30-day count grows with
every new sample (exactly the distinct IPs the counters hold).
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from crawler.dashboard.app import create_app
from crawler.dashboard.views import Views
from crawler.queue.coverage import catalogue, of_torrent
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.test_worker_e2e import counter, env, h, pc, pcj  # noqa: F401 (fixture)

SWARM = 500


def test_a_swarm_of_500_behind_a_tracker_giving_200_is_covered_at_40_percent(env, opentracker, client, keys,  # noqa: F811
                                                                             settings):
    ih = h("coverage-500")
    ot = opentracker([ih])
    for i in range(SWARM):
        ot.announce_from(peer_address(i), ih, 6881, left=i % 2)
    env.update(PEERCRAWL_TRACKERS=f"{ot.udp_url}|200", PEERCRAWL_REVISIT_SECONDS="0")
    pcj(env, "add", ih)
    seen, counted = [], 0
    for visit in range(1, 4):
        pc(env, "worker", "--max-visits", "1", "--concurrency", "1", timeout=60)
        t = pcj(env, "torrent", ih)
        assert t["visits"] == visit
        # the tracker counts the peers it holds; the crawler's own announce may be one of them
        assert t["reported_last_visit"] in (SWARM, SWARM + 1)
        # 200 a reply, less the crawler's own address when the tracker sampled it
        assert t["counted_last_visit"] in (199, 200), t
        assert t["coverage"] == round(t["counted_last_visit"] / t["reported_last_visit"], 4)
        counted += t["counted_last_visit"]
        users = counter(env, "torrents")[f"torrents.{ih}.users"]
        assert t["counted_30_days"] == users  # every IP counted since the first visit
        seen.append(users)
    assert seen[0] >= 199 and seen[0] < seen[2] <= SWARM  # new samples of the same swarm
    cov = pcj(env, "status")["coverage"]
    assert (cov["counted"], cov["window_s"]) == (counted, 3600)
    assert cov["reported"] in (3 * SWARM, 3 * SWARM + 3)
    assert cov["coverage"] == round(counted / cov["reported"], 4)
    assert "coverage (1 h)" in pc(env, "status").stdout
    (row,) = pcj(env, "stats", "torrents")
    assert {k: row[k] for k in ("reported_last_visit", "counted_last_visit", "counted_30_days", "coverage")} == {
        k: t[k] for k in ("reported_last_visit", "counted_last_visit", "counted_30_days", "coverage")}
    # the dashboard's /metrics, as status --json has them
    text = create_app(Views(client, keys, settings)).test_client().get("/metrics").get_data(as_text=True)
    got = {m.name: m.value for f in text_string_to_metric_families(text) for m in f.samples
           if m.name.startswith("peercrawl_coverage")}
    assert got == {"peercrawl_coverage_counted_ips": counted, "peercrawl_coverage_reported_peers": cov["reported"],
                   "peercrawl_coverage_ratio": cov["coverage"]}


def test_the_30_day_count_forgets_days_the_window_left():
    day = 20_000
    fields = {"reported": "50", "peers_last_visit": "10", f"n:{day}": "4", f"n:{day - 29}": "3",
              f"n:{day - 30}": "100", "n:junk": "7"}
    got = of_torrent(fields, now=day * 86400 + 5)
    assert got == {"counts_estimated": False, "reported_last_visit": 50, "counted_last_visit": 10, "counted_30_days": 7, "coverage": 0.2}
    assert of_torrent({"peers_last_visit": "3"}, now=0)["coverage"] is None  # nothing reported: no coverage


def test_catalogue_sums_the_last_hour_only():
    now = 1_000_000 * 60
    old, recent = str(now - 3600), str(now - 60)
    got = catalogue([{f"cc:{recent}".encode(): b"30", f"cr:{recent}".encode(): b"120", f"cc:{old}": "999",
                      f"cr:{old}": "999", f"rt:{recent}:3": "1"}, {f"cc:{recent}": "10", f"cr:{recent}": "40"}],
                    now)
    assert got == {"window_s": 3600, "counted": 40, "reported": 160, "coverage": 0.25}


@pytest.mark.parametrize("gap_days", [1, 29, 30, 31, 45, 400])
def test_complete_keeps_only_the_days_in_the_window(client, namespace, gap_days):
    """complete.lua deletes the n:<day> fields the window left, however long since the last visit."""
    from crawler.keys import Keys
    from crawler.queue.queue import Queue
    from crawler.queue.scoring import Outcome
    from crawler.settings import Settings
    from crawler.torrents.items import NewItem

    s = Settings(revisit_seconds=0)
    keys = Keys(namespace)
    q = Queue(client, keys, s)
    ih = h(f"window-{gap_days}")
    q.add([NewItem(ih)])
    t0 = 21_000 * 86400.0
    at = [t0 + d * 86400 for d in (0, 1, 2, 2 + gap_days)]
    for i, now in enumerate(at):
        lease = q.claim(1, now=now)[0]
        q.complete(lease, Outcome.SOME, peers=5, reported=10, new=i + 1, now=now)
    raw = {k.decode(): v.decode() for k, v in client.hgetall(keys.for_torrent(ih).torrent(ih)).items()}
    visited = [int(t // 86400) for t in at]
    last = visited[-1]
    kept = [d for d in visited if last - 30 < d]  # the fields of days the window has not left
    assert sorted(int(k[2:]) for k in raw if k.startswith("n:")) == kept
    assert of_torrent(raw, now=at[-1])["counted_30_days"] == sum(i + 1 for i, d in enumerate(visited) if d in kept)


def test_complete_adds_the_visits_of_one_day(client, namespace):
    """Two visits of one day: n:<day> holds the sum of what each counted first, a stored count kept."""
    from crawler.keys import Keys
    from crawler.queue.queue import Queue
    from crawler.queue.scoring import Outcome
    from crawler.settings import Settings
    from crawler.torrents.items import NewItem

    keys = Keys(namespace)
    q = Queue(client, keys, Settings(revisit_seconds=0))
    ih = h("one-day")
    q.add([NewItem(ih)])
    now = 21_000 * 86400.0
    for i, new in enumerate((7, 0, 2**40)):
        lease = q.claim(1, now=now + i)[0]
        q.complete(lease, Outcome.SOME, peers=5, new=new, now=now + i)
    assert client.hget(keys.for_torrent(ih).torrent(ih), "n:21000") == str(7 + 2**40).encode()


def test_coverage_survives_a_redis_killed_and_restarted(tmp_path, settings):
    """The figures are the torrent's own fields and the shard's rates: an AOF Redis killed with
    SIGKILL and started again gives back the same torrent and catalogue coverage."""
    import time

    from crawler.keys import Keys
    from crawler.queue.queue import Queue
    from crawler.queue.scoring import Outcome
    from crawler.queue.view import QueueView
    from crawler.torrents.items import NewItem
    from tests.redis_servers import AofRedis

    server = AofRedis(tmp_path)
    try:
        keys, ih, now = Keys("cov"), h("restart"), time.time()
        q = Queue(server.client, keys, settings.replace(revisit_seconds=0))
        q.add([NewItem(ih)], now=now - 1)
        q.complete(q.claim(1, now=now)[0], Outcome.SOME, peers=40, reported=160, new=40, now=now)
        view = QueueView(server.client, keys)
        before = view.torrent(ih, now), view.coverage(now)
        assert (before[0]["coverage"], before[0]["counted_30_days"], before[1]["coverage"]) == (0.25, 40, 0.25)
        server.restart()
        view = QueueView(server.client, keys)
        assert (view.torrent(ih, now), view.coverage(now)) == before
    finally:
        server.stop()
