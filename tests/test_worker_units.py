"""The worker's parts in-process: cooling that respects trackers' min interval,
the outage flag, heartbeats in ``status``, and the autoscaler's decisions."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time

import gevent
import pytest
from gevent.event import Event

from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.report.queue_report import queue_report
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.test_connect import private_redis  # noqa: F401 (fixture)
from workers.autoscale import Autoscaler, Sample, settled
from workers.heartbeat import Heartbeat, WorkerHealth
from workers.visit import Visitor


def three_peers(opentracker, tag: bytes, settings, tmp_path):  # noqa: F811 (fixture)
    """A torrent named by ``tag`` with three peers on a real opentracker, and settings revisiting
    after 1 s with a City database: ``(info-hash, tracker, settings)``."""
    ih = hashlib.sha1(tag).hexdigest()
    ot = opentracker([ih])
    for i in range(3):
        ot.announce_from(peer_address(i), ih, 6881)
    return ih, ot, settings.replace(revisit_seconds=1.0, geoip_db=write_city_db(tmp_path / "c.mmdb"))


def test_cooling_respects_the_trackers_min_interval(settings, client, keys, opentracker, tmp_path):  # noqa: F811 (fixtures)
    # Revisit after 1 s, but opentracker's HTTP reply says "min interval" (minutes).
    ih, ot, s = three_peers(opentracker, b"min-interval", settings, tmp_path)
    from crawler.counters.recorder import Recorder

    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    q.add([NewItem(ih, (ot.http_url,))])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    (lease,) = q.claim(1)
    t0 = time.time()
    visit = v.visit(lease)
    assert (visit.state, visit.peers) == ("cooling", 3)
    nb = view.torrent(ih)["tracker_not_before"]
    assert nb[ot.http_url] > t0 + 60  # the tracker's min interval, not the 1 s revisit
    # The torrent cools until the tracker may be asked again, whatever the revisit setting.
    assert view.torrent(ih)["due"] == pytest.approx(nb[ot.http_url], abs=1.0)
    # Forced ready early (as after a restart), the visit asks nobody and keeps the score.
    client.zadd(keys.cooling, {ih: time.time() - 1})
    (lease,) = q.claim(1)
    again = v.visit(lease)
    assert again.state == "skipped" and again.asked == 0
    assert view.state(ih)[1] == pytest.approx(0.8)
    # Deferred, not failed: no failed visit counted, due when the tracker may be asked.
    t = view.torrent(ih)
    assert (t["state"], t["visits"], t["failed_visits"]) == ("cooling", 1, 0)
    assert t["due"] == pytest.approx(nb[ot.http_url], abs=1.0)
    trackers.close()


def test_health_flags_an_outage_after_a_streak_and_clears_it():
    h = WorkerHealth(failing_after=3)
    assert [h.note(False) for _ in range(3)] == [False, False, True]
    assert h.failing
    assert h.note(True, peers=4) is True and not h.failing
    assert (h.visits, h.failed, h.peers) == (4, 3, 4)
    assert h.per_hour() > 0
    # visits the address policy or the trackers refused count, and neither make nor break a streak
    assert [h.note(False) for _ in range(2)] + [h.note(False, network=False) for _ in range(5)] == [False] * 7
    assert (h.visits, h.failed, h.streak) == (11, 10, 2)
    assert h.note(False) is True and h.note(False, network=False) is False and h.failing


def test_heartbeat_lists_live_workers_and_drops_dead_ones(settings, client, keys):
    q = Queue(client, keys, settings)
    a = Heartbeat(client, keys, interval=0.3, worker_id="a")
    b = Heartbeat(client, keys, interval=30, worker_id="b")
    a.beat({"concurrency": 5, "visits": 10, "visits_per_hour": 100.0, "failing": False})
    b.beat({"concurrency": 7, "visits": 20, "visits_per_hour": 300.0, "failing": True})
    r = queue_report(q, time.time())
    assert {w["id"]: w["concurrency"] for w in r["workers"]} == {"a": 5, "b": 7}
    assert "b" in r["outage"]
    time.sleep(1.0)  # a stops beating: its entry expires
    r = queue_report(q, time.time())
    assert [w["id"] for w in r["workers"]] == ["b"]
    b.leave()
    assert queue_report(q, time.time())["workers"] == []


def test_capacity_needed_from_tracked_torrents_and_per_worker_rate(settings, client, keys):
    s = settings.replace(revisit_seconds=1800.0)
    q = Queue(client, keys, s)
    q.add([NewItem(hashlib.sha1(str(i).encode()).hexdigest()) for i in range(900)])
    Heartbeat(client, keys, worker_id="w").beat({"concurrency": 10, "visits_per_hour": 600.0})
    cap = queue_report(q, time.time())["capacity"]
    # 900 torrents every 1800 s = 1800 visits/hour; 600 per worker -> 3 workers.
    assert cap["visits_needed_per_hour"] == 1800.0
    assert cap["workers_needed"] == 3


def test_autoscaler_grows_when_behind_holds_when_saturated_shrinks_when_overloaded_or_idle(client):
    def fresh() -> Autoscaler:
        a = Autoscaler(client, low=2, high=40)
        a.best_rtt = 0.0005
        a.starting = False  # past its start: the rules a running pool follows
        return a

    assert fresh().decide(8, busy=8, latency=30.0, cpu=0.3, rtt=0.0005) == (10, "behind")
    # Saturated while behind: the most this process can do; hold, do not shrink.
    assert fresh().decide(8, busy=8, latency=30.0, cpu=0.95, rtt=0.0005) == (8, "hold: saturated")
    assert fresh().decide(8, busy=8, latency=30.0, cpu=0.3, rtt=0.005) == (8, "hold: saturated")  # Redis busier
    assert fresh().decide(8, busy=8, latency=30.0, cpu=0.3, rtt=0.0005, lag=0.2) == (8, "hold: saturated")
    assert fresh().decide(10, busy=2, latency=0.0, cpu=0.1, rtt=0.0005) == (9, "idle")
    assert fresh().decide(10, busy=4.5, latency=0.0, cpu=0.1, rtt=0.0005) == (9, "idle")
    assert fresh().decide(40, busy=18, latency=0.0, cpu=0.1, rtt=0.0005) == (36, "idle")
    assert fresh().decide(30, busy=14, latency=0.0, cpu=0.1, rtt=0.0005) == (27, "idle")
    assert fresh().decide(8, busy=6, latency=0.0, cpu=0.1, rtt=0.0005) == (8, "hold")  # keeping up
    assert fresh().decide(40, busy=40, latency=99.0, cpu=0.1, rtt=0.0005) == (40, "behind")  # capped
    assert fresh().decide(2, busy=0, latency=0.0, cpu=0.0, rtt=0.0005) == (2, "idle")  # floored


def test_autoscaler_remembers_the_sizes_that_overloaded_and_fell_behind(client):
    a = Autoscaler(client, low=2, high=40, memory_steps=3)
    a.best_rtt = 0.0005
    a.starting = False
    # Overloaded (Redis struggling, or the loop too late): shrink, and do not grow back into it.
    assert a.decide(20, busy=20, latency=30.0, cpu=0.5, rtt=0.05) == (16, "overloaded")
    assert a.decide(16, busy=16, latency=30.0, cpu=0.5, rtt=0.0005) == (19, "behind")
    assert a.decide(19, busy=19, latency=30.0, cpu=0.5, rtt=0.0005) == (19, "hold: under a ceiling")
    assert a.decide(19, busy=19, latency=30.0, cpu=0.5, rtt=0.0005, lag=2.0) == (15, "overloaded")
    for _ in range(3):
        a.decide(15, busy=12, latency=0.0, cpu=0.5, rtt=0.0005)
    assert a.ceiling is None  # forgotten after memory_steps decisions: growth may probe again
    # Fell behind at 4: idle samples at 5 do not shrink back to 4 for memory_steps decisions.
    b = Autoscaler(client, low=2, high=40, memory_steps=3)
    b.starting = False
    assert b.decide(4, busy=4, latency=9.0, cpu=0.3, rtt=None) == (5, "behind")
    assert b.decide(5, busy=2, latency=0.0, cpu=0.3, rtt=None) == (5, "hold: above a floor")
    assert b.decide(5, busy=2, latency=0.0, cpu=0.3, rtt=None) == (5, "hold: above a floor")
    assert b.decide(5, busy=2, latency=0.0, cpu=0.3, rtt=None) == (5, "hold: above a floor")
    assert b.decide(5, busy=2, latency=0.0, cpu=0.3, rtt=None) == (4, "idle")


def test_autoscaler_grows_on_a_full_core_until_visits_queue(client):
    a = Autoscaler(None, low=2, high=100)
    a.starting = False
    # A full core, each visit holding its runner 20 ms: nothing queues yet, and a larger pool shares
    # its batches among more visits (the lowest slot becomes 20 ms).
    assert a.decide(8, busy=8, latency=9.0, cpu=0.98, rtt=None, slot=0.020) == (10, "behind")
    assert a.best_slot == 0.020
    assert a.decide(10, busy=10, latency=9.0, cpu=0.98, rtt=None, slot=0.022) == (13, "behind")
    assert a.decide(13, busy=13, latency=9.0, cpu=0.98, rtt=None, slot=0.026) == (17, "behind")
    # Past 2.5x the lowest slot (slot_factor) visits wait for the process: hold, whatever the core
    # (the trackers' budget or Redis may be what they wait for).
    assert a.decide(17, busy=17, latency=9.0, cpu=0.98, rtt=None, slot=0.051) == (17, "hold: queued")
    assert a.decide(17, busy=17, latency=9.0, cpu=0.3, rtt=None, slot=0.051) == (17, "hold: queued")
    assert a.best_slot == 0.020
    # An interval too short to give a slot: a full core holds (a guess), one with room grows.
    assert a.decide(17, busy=17, latency=9.0, cpu=0.98, rtt=None) == (17, "hold: saturated")
    assert a.decide(17, busy=17, latency=9.0, cpu=0.5, rtt=None) == (22, "behind")
    # On time, nothing queues: the slot is the trackers' and Redis's latency now, the new lowest
    # (slower trackers: growth goes on from it once the crawl falls behind again).
    assert a.decide(22, busy=16, latency=0.0, cpu=0.3, rtt=None, slot=0.060) == (22, "hold")
    assert a.best_slot == 0.060
    assert a.decide(22, busy=22, latency=9.0, cpu=0.98, rtt=None, slot=0.070) == (28, "behind")


def test_autoscaler_bounds_the_slot_where_more_runners_do_not_visit_faster(client):
    # Visits/s capped at 400 (a tracker's budget, Redis): each growth lengthens the slot by Little's
    # law until it passes 2.5x its lowest, and the pool holds there however long it stays behind.
    def sizes(a: Autoscaler) -> list[int]:
        size, out = 8, []
        for _ in range(30):
            size, _why = a.decide(size, busy=size, latency=60.0, cpu=0.6, rtt=None, slot=size / 400.0)
            out.append(size)
        return out

    past = Autoscaler(None, low=2, high=500)
    past.starting = False
    assert sizes(past)[3:] == [22] * 27  # the first size whose slot passed 2.5x the lowest, for good
    assert past.best_slot == 8 / 400.0
    # From its start: 16, 32 (queued: a ceiling), back to 16 grown by a quarter, then as above.
    assert sizes(Autoscaler(None, low=2, high=500))[:5] == [16, 32, 20, 25, 25]


def test_autoscaler_doubles_at_its_start_until_a_decision_does_not_grow(client):
    a = Autoscaler(None, low=2, high=500)
    assert a.decide(8, busy=8, latency=60.0, cpu=0.6, rtt=None, slot=0.020) == (16, "behind: starting")
    assert a.decide(16, busy=16, latency=60.0, cpu=0.7, rtt=None, slot=0.030) == (32, "behind: starting")
    # Queued past 2.5x the lowest slot: the doubling went too far; 32 is a ceiling, back to 16 grown
    # by a quarter, and growth by quarters from there, under the ceiling.
    assert a.decide(32, busy=32, latency=60.0, cpu=0.9, rtt=None, slot=0.060) == (20, "back from the start")
    assert (a.ceiling, a.starting) == (32, False)
    assert a.decide(20, busy=20, latency=60.0, cpu=0.8, rtt=None, slot=0.040) == (25, "behind")
    assert a.decide(25, busy=25, latency=60.0, cpu=0.8, rtt=None, slot=0.045) == (31, "behind")
    assert a.decide(31, busy=31, latency=60.0, cpu=0.8, rtt=None, slot=0.048) == (31, "hold: under a ceiling")
    # Saturated just after a doubling: held, as ever (one sample of a busy loop or Redis), the start over.
    b = Autoscaler(None, low=2, high=500)
    assert b.decide(8, busy=8, latency=60.0, cpu=0.6, rtt=None, slot=0.020) == (16, "behind: starting")
    assert b.decide(16, busy=16, latency=60.0, cpu=0.9, rtt=None, lag=0.5, slot=0.025) == (16, "hold: saturated")
    assert (b.starting, b.ceiling) == (False, None)
    assert b.decide(16, busy=16, latency=60.0, cpu=0.7, rtt=None, slot=0.025) == (20, "behind")
    # A backlog not late yet: during the start the torrents due now count as late by the time this
    # process's rate needs for them (here 40 s), past it only the queue's latency does.
    e = Autoscaler(None, low=2, high=500)
    assert e.decide(8, busy=8, latency=1.0, cpu=0.6, rtt=None, slot=0.020, backlog=40.0) == (16, "behind: starting")
    assert e.decide(16, busy=16, latency=2.0, cpu=0.6, rtt=None, slot=0.020, backlog=3.0) == (16, "hold")
    assert e.starting is False
    assert e.decide(16, busy=16, latency=2.0, cpu=0.6, rtt=None, slot=0.020, backlog=40.0) == (16, "hold")
    # On time at its first decision: the start is over, with nothing to step back from.
    c = Autoscaler(None, low=2, high=500)
    assert c.decide(8, busy=6, latency=0.0, cpu=0.3, rtt=None) == (8, "hold")
    assert c.starting is False
    assert c.decide(8, busy=8, latency=9.0, cpu=0.3, rtt=None) == (10, "behind")
    # Overloaded at its start: shrunk as ever, the start over.
    d = Autoscaler(None, low=2, high=500)
    assert d.decide(8, busy=8, latency=9.0, cpu=0.3, rtt=None, lag=2.0) == (6, "overloaded")
    assert d.starting is False


def test_autoscaler_decides_a_second_after_each_doubling_of_its_start():
    # During the start a second between decisions (the first also waits for figures to weigh:
    # the next test); once the start is over, the interval again.
    a = Autoscaler(None, low=2, high=500, interval=5.0)
    assert a.wait() == 1.0
    assert a.decide(8, busy=8, latency=60.0, cpu=0.6, rtt=None, slot=0.020) == (16, "behind: starting")
    assert a.wait() == 1.0
    assert a.decide(16, busy=16, latency=60.0, cpu=0.7, rtt=None, slot=0.030) == (32, "behind: starting")
    assert a.wait() == 1.0
    assert a.decide(32, busy=32, latency=60.0, cpu=0.9, rtt=None, slot=0.060) == (20, "back from the start")
    assert a.wait() == 5.0
    # a start that ends at its first decision waits the interval from then on
    b = Autoscaler(None, low=2, high=500, interval=5.0)
    assert b.decide(8, busy=6, latency=0.0, cpu=0.3, rtt=None) == (8, "hold") and b.wait() == 5.0
    # an interval shorter than a second is kept for the start too
    assert Autoscaler(None, low=2, high=500, interval=0.5).start_interval == 0.5


def test_autoscalers_first_decision_weighs_the_pool_at_work_not_its_start_up(client):
    # The probe's samples count from the first busy runner: the first decision comes half a start
    # interval after it, its busy share that of the pool at work (the start-up's idle runners
    # would halve it here, and a pool that looked half idle would not grow).
    a = Autoscaler(client, low=2, high=64, start=8, interval=30.0, start_interval=0.4)
    busy, stop = [0], Event()
    probe = gevent.spawn(a.probe, lambda: busy[0], stop)
    try:
        gevent.sleep(0.5)  # no runner busy yet
        assert a.step(Sample(size=8, busy=0, visits=0, latency=30.0)) == 8 and a.history == []
        busy[0] = 8
        gevent.sleep(0.1)  # working, not yet for half a start interval
        assert a.step(Sample(size=8, busy=8, visits=20, latency=30.0)) == 8 and a.history == []
        gevent.sleep(0.2)
        # a backlog due now but not late yet (latency 1 s): 60 visits in ~0.3 s leave 5,000 due for long
        new = a.step(Sample(size=8, busy=8, visits=60, latency=1.0, ready=5000))
        last = a.history[-1]
        assert last["busy"] == 8.0  # every sample counted was of the pool at work
        assert (new, last["why"]) in ((16, "behind: starting"), (8, "hold: saturated"))
    finally:
        stop.set()
        probe.join()
        a.close()
    # A pool that never works (nothing due) decides after an interval, as a running one does.
    b = Autoscaler(client, low=2, high=64, start=8, interval=0.3)
    assert b.step(Sample(size=8, busy=0, visits=0, latency=0.0)) == 8 and b.history == []
    gevent.sleep(0.35)
    assert b.step(Sample(size=8, busy=0, visits=0, latency=0.0)) == 7 and b.history[-1]["why"] == "idle"
    assert (b.starting, b.wait()) == (False, 0.3)
    b.close()


def test_autoscaler_steps_from_a_sample_of_the_pools_figures(client):
    a = Autoscaler(client, low=2, high=40, start=8, interval=0.0)  # a first decision at once
    # Redis could not tell the queue latency: the size is held and nothing is recorded.
    assert a.step(Sample(size=8, busy=8, visits=0, latency=None)) == 8 and a.history == []
    new = a.step(Sample(size=8, busy=8, visits=50, latency=30.0))
    last = a.history[-1]
    # Behind with every runner busy: grown, unless this (shared) machine's CPU is saturated.
    assert (new, last["why"]) in ((16, "behind: starting"), (8, "hold: saturated"))
    assert (last["size"], last["was"], last["busy"], a.size) == (new, 8, 8, new)
    a.close()


def test_settled_means_no_change_during_the_last_steps():
    def h(*sizes, start=8):
        out, was = [], start
        for t, size in enumerate(sizes):
            out.append({"t": float(t), "size": size, "was": was})
            was = size
        return out

    assert settled(h(10, 13, 17, 17, 17, 17, 17, 17)) == {"stable": True, "size": 17, "since_s": 2.0}
    assert settled(h(10, 13, 17, 17, 17, 17))["stable"] is False  # only 3 decisions since
    assert settled(h(8, 8, 8, 8, 8)) == {"stable": True, "size": 8, "since_s": 0.0}
    assert settled([])["stable"] is False


def test_a_skip_defers_without_counting_a_visit_or_a_failure(settings, client, keys):
    q = Queue(client, keys, settings)
    view = QueueView(q.client, q.keys)
    ih = hashlib.sha1(b"defer").hexdigest()
    q.add([NewItem(ih)])
    (lease,) = q.claim(1)
    due = time.time() + 600
    assert q.defer(lease, due) is True
    t = view.torrent(ih)
    assert (t["state"], t["score"], t["visits"], t["failed_visits"]) == ("cooling", 1.0, 0, 0)
    assert t["due"] == pytest.approx(due)
    assert view.visits_since(3600, failed=True) == 0 and view.visits_since(3600) == 0
    assert q.defer(lease, due) is False  # not in flight any more: nothing changes
    client.zadd(keys.cooling, {ih: time.time() - 1})
    (again,) = q.claim(1)
    assert again.token == lease.token + 1


def test_complete_and_claim_reload_the_scripts_a_restarted_redis_forgot(settings, keys, private_redis):  # noqa: F811
    from crawler.queue.scoring import Outcome

    _, client = private_redis
    q = Queue(client, keys, settings)
    view = QueueView(client, keys)
    hs = [hashlib.sha1(f"ns{i}".encode()).hexdigest() for i in range(3)]
    q.add([NewItem(x) for x in hs])
    (lease,) = q.claim(1)
    # As after a restart: this Redis (the test's own) knows no script; each EVALSHA answers NOSCRIPT.
    client.script_flush()
    assert q.complete(lease, Outcome.FULL) == ("cooling", 1.2)
    assert view.torrent(lease.info_hash)["visits"] == 1
    client.script_flush()
    (nxt,) = q.claim(1)
    assert nxt.info_hash in hs and nxt.info_hash != lease.info_hash
    assert view.state(nxt.info_hash)[0] == "in_flight"


def test_a_worker_process_collects_garbage_less_often_and_leaves_its_start_up_heap_alone():
    import gc

    from workers.process import GC_FIRST_GENERATION, tune_gc

    before = gc.get_threshold()
    gc.disable()  # as `peercrawl worker` starts (crawler.cli.main)
    try:
        tune_gc()
        assert gc.isenabled()
        assert gc.get_threshold() == (GC_FIRST_GENERATION, *before[1:])
        assert gc.get_freeze_count() > 1000  # modules, classes, settings: out of every later collection
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_worker_starts_without_rich_or_the_other_commands_yet_rich_still_draws_after():
    """structlog is imported with rich hidden (crawler.logs), and `peercrawl worker` imports only its
    own command's module; rich imports as before for whoever draws with it, and console logs still
    render a traceback."""
    code = """
import gc, io, sys
sys.argv = ["peercrawl", "worker", "--help"]
from crawler.cli import main
try:
    main()
except SystemExit:
    pass
assert gc.isenabled()
import crawler.cli.context, workers.process  # what the command imports once it runs
assert "rich" not in sys.modules, sorted(m for m in sys.modules if m.startswith("rich"))
assert "crawler.cli.torrent_view" not in sys.modules and "crawler.dashboard.server" not in sys.modules
from crawler import logs
import rich.console
out = io.StringIO()
logs.configure(fmt="console", stream=out)
try:
    1 / 0
except ZeroDivisionError:
    logs.get("t").exception("boom")
assert "ZeroDivisionError" in out.getvalue() and "boom" in out.getvalue(), out.getvalue()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_torrent_shows_which_sources_the_last_visit_asked_and_why_it_skipped_the_others(  # noqa: F811 (fixtures)
        settings, client, keys, opentracker, tmp_path):
    from crawler.counters.recorder import Recorder
    from crawler.queue.torrent_record import shown
    from tests.opentracker import free_port

    ih = hashlib.sha1(b"which-sources").hexdigest()
    ot, oh = opentracker([ih]), opentracker([ih])  # ot asked over UDP (and named over HTTP too); oh over HTTP
    for t in (ot, oh):
        t.announce_from(peer_address(1), ih, 6881)
    dead = f"udp://127.0.0.1:{free_port()}/announce"  # nobody listens: fails, then backs off
    s = settings.replace(revisit_seconds=1.0, udp_timeout=0.3, udp_retries=1, tracker_backoff_after=1,
                         geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    q.add([NewItem(ih, (oh.http_url, ot.udp_url, ot.http_url, dead))])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        (lease,) = q.claim(1)
        assert v.visit(lease).peers == 1
        last = view.torrent(ih)["last_visit_sources"]
        same = "skipped: another URL of the same tracker (one host, port and path) was asked"
        assert last == {"dht": "not asked: the DHT is off",
                        "trackers": {oh.http_url: "announced", ot.udp_url: "announced", ot.http_url: same,
                                     dead: "failed"}}
        client.zadd(keys.cooling, {ih: time.time() - 1})
        (lease,) = q.claim(1)
        v.visit(lease)
        info = view.torrent(ih)
        assert info["last_visit_sources"]["trackers"] == {
            oh.http_url: "skipped: inside its min interval",  # opentracker's HTTP min interval
            ot.udp_url: "announced", ot.http_url: same,
            dead: "skipped: backing off"}
        # as torrent --json and the dashboard show it: a passkey in a URL stays out
        secret = "http://127.0.0.1:1/announce/passkey0123456789abcdef"
        info["last_visit_sources"]["trackers"][secret] = "announced"
        info["tracker_not_before"][secret] = 1.0
        info["trackers"].append(secret)
        assert "passkey0123456789abcdef" not in str(shown(info))
    finally:
        trackers.close()


def test_a_tracker_named_by_its_udp_and_http_urls_is_asked_once_per_visit(  # noqa: F811 (fixtures)
        settings, client, keys, opentracker, tmp_path):
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from crawler.bencode import codec as bencode
    from crawler.counters.recorder import Recorder
    from tests.test_request_costs import received

    s = settings.replace(revisit_seconds=1.0, udp_timeout=0.3, udp_retries=1, tracker_backoff_after=1,
                         geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    ih, other = hashlib.sha1(b"named-twice").hexdigest(), hashlib.sha1(b"udp-down").hexdigest()
    ot = opentracker([ih])
    ot.announce_from(peer_address(2), ih, 6881)

    class Handler(BaseHTTPRequestHandler):  # an HTTP tracker whose UDP side is down
        def log_message(self, *a):
            pass

        def do_GET(self):
            code, body = (404, b"") if self.path.startswith("/scrape") else (200, bencode.encode(
                {b"interval": 1800, b"complete": 1, b"incomplete": 0,
                 b"peers": socket.inet_aton("127.9.9.7") + (6883).to_bytes(2, "big")}))
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        # opentracker's UDP and HTTP URLs: one tracker, asked over UDP alone
        q.add([NewItem(ih, (ot.http_url, ot.udp_url))])
        before = received(ot)
        (lease,) = q.claim(1)
        assert v.visit(lease).peers == 1
        after = received(ot)
        assert after[("udp", "announce")] - before[("udp", "announce")] == 2  # the announce and its withdrawal
        assert after[("tcp", "announce")] == before[("tcp", "announce")]
        assert after[("tcp", "scrape")] == before[("tcp", "scrape")]
        assert view.torrent(ih)["last_visit_sources"]["trackers"][ot.http_url].startswith("skipped: another URL")
        # a tracker whose UDP URL fails and backs off is asked at its HTTP URL on the next visit
        udp, http = f"udp://127.0.0.1:{port}/announce", f"http://127.0.0.1:{port}/announce"
        q.add([NewItem(other, (udp, http))])
        (lease,) = [x for x in q.claim(2) if x.info_hash == other]
        assert v.visit(lease).state == "failed"
        client.zadd(keys.cooling, {other: time.time() - 1})
        (lease,) = [x for x in q.claim(2) if x.info_hash == other]
        assert v.visit(lease).peers == 1
        assert view.torrent(other)["last_visit_sources"]["trackers"] == {
            udp: "skipped: another URL of the same tracker (one host, port and path) was asked", http: "announced"}
    finally:
        server.shutdown()
        server.server_close()
        trackers.close()


def test_status_groups_the_workers_by_machine(settings, client, keys):
    from crawler.report.queue_report import machines

    q = Queue(client, keys, settings)
    beats = []
    for host, pid, conc in (("m2", 7, 3), ("m1", 9, 5), ("m1", 8, 4)):
        hb = Heartbeat(client, keys, interval=30, worker_id=f"{host}:{pid}")
        hb.host, hb.pid = host, pid
        hb.beat({"concurrency": conc, "in_flight": 1, "visits_per_hour": 10.5, "failing": False})
        beats.append(hb)
    try:
        r = queue_report(q, time.time())
        assert [(w["host"], w["pid"]) for w in r["workers"]] == [("m1", 8), ("m1", 9), ("m2", 7)]
        assert r["machines"] == [
            {"host": "m1", "processes": 2, "concurrency": 9, "in_flight": 2, "visits_per_hour": 21.0},
            {"host": "m2", "processes": 1, "concurrency": 3, "in_flight": 1, "visits_per_hour": 10.5}]
        assert machines([]) == []
    finally:
        for hb in beats:
            hb.leave()


@pytest.mark.interpreted
def test_a_torrents_first_visit_records_its_peers_without_a_probe(settings, client, keys, opentracker,  # noqa: F811
                                                                  tmp_path):
    # a torrent with no notes yet has no group record the probe could find: its first visit's peers go
    # straight to record.lua; once its notes are kept, its next visit is probed; both count exactly
    from crawler.counters.recorder import Recorder

    class Probes(Recorder):
        """A real recorder noting each visit's probe flag."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.flags: list[bool] = []

        def record_visits(self, visits, now, probes=None):
            self.flags += list(probes)
            return super().record_visits(visits, now, probes)

    ih, ot, s = three_peers(opentracker, b"first-visit-unprobed", settings, tmp_path)
    q = Queue(client, keys, s)
    q.add([NewItem(ih, (ot.udp_url,))])
    trackers = Trackers(s, client, keys)
    rec = Probes(client, keys, s)
    v = Visitor(q, keys, s, trackers, rec)
    try:
        (lease,) = q.claim(1)
        assert (v.visit(lease).new, rec.flags) == (3, [False])
        client.zadd(keys.cooling, {ih: time.time() - 1})
        (lease,) = q.claim(1)
        assert (v.visit(lease).new, rec.flags) == (0, [False, True])
    finally:
        trackers.close()


@pytest.mark.interpreted
def test_a_visits_source_notes_go_in_its_completions_step(settings, client, keys, opentracker,  # noqa: F811
                                                          tmp_path):
    # an answered visit writes its notes in its completion's script call, no call of their own; a visit
    # no source answered keeps its notes on their own, then its failure
    from crawler.counters.recorder import Recorder
    from tests.opentracker import free_port

    ih, ot, s = three_peers(opentracker, b"notes-with-completion", settings, tmp_path)
    dead = hashlib.sha1(b"notes-of-a-failure").hexdigest()
    s = s.replace(udp_timeout=0.3, udp_retries=1)
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    nobody = f"udp://127.0.0.1:{free_port()}/announce"
    q.add([NewItem(ih, (ot.udp_url,)), NewItem(dead, (nobody,))])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    trips: list[list] = []
    run = q.store.run

    def noting(calls, wait=None, **options):
        trips.append([c[0] for c in calls])
        return run(calls, wait, **options)

    q.store.run = noting  # the Store the queue and its plans share
    try:
        for _ in range(2):
            (lease,) = q.claim(1)
            v.visit(lease)
        note, complete = q.plans._note, q._complete
        assert [complete] in trips and [note] in trips and not any(note in t and complete in t for t in trips)
        assert view.torrent(ih)["state"] == "cooling" and view.torrent(dead)["state"] == "cooling"
        assert view.torrent(ih)["last_visit_sources"]["trackers"] == {ot.udp_url: "announced"}
        assert view.torrent(dead)["last_visit_sources"]["trackers"] == {nobody: "failed"}
    finally:
        trackers.close()


def test_a_revisit_leaves_notes_it_would_not_change_alone_until_they_run_short(settings, client, keys,
                                                                              opentracker, tmp_path):  # noqa: F811
    # notes are written to live four revisit intervals (two needed, two to spare); a revisit that would
    # write the same fields leaves them while they outlive the two it needs, and rewrites them (their
    # whole life) when they would not, or when a field differs
    from crawler.counters.recorder import Recorder

    ih, ot, s = three_peers(opentracker, b"notes-left-alone", settings, tmp_path)
    q = Queue(client, keys, s)
    q.add([NewItem(ih, (ot.udp_url,))])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    notes = keys.for_torrent(ih).tracker_min_interval(ih)
    life, interval = 4 * int(s.revisit_seconds), int(s.revisit_seconds)

    def revisit() -> None:
        client.zadd(keys.cooling, {ih: time.time() - 1})
        (lease,) = q.claim(1)
        assert v.visit(lease).state == "cooling"

    try:
        (lease,) = q.claim(1)
        v.visit(lease)
        written = client.hgetall(notes)
        assert written and life - 60 < client.ttl(notes) <= life
        client.expire(notes, 3 * interval)  # still more than the two a revisit needs
        revisit()
        assert client.hgetall(notes) == written and 3 * interval - 60 < client.ttl(notes) <= 3 * interval  # untouched
        client.expire(notes, 2 * interval - 60)  # less than two: rewritten, its whole life
        revisit()
        assert client.hgetall(notes) == written and life - 60 < client.ttl(notes) <= life
        client.hset(notes, "last", "00000000:x|-")  # a field that differs: rewritten
        client.expire(notes, 3 * interval)
        revisit()
        assert client.hgetall(notes) == written and life - 60 < client.ttl(notes) <= life
    finally:
        trackers.close()
