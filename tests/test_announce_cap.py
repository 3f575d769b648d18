"""The announce cap (contract §3): tracker requests per second across every worker of a namespace.

Against the real Redis: the schedule of ``rate_budget.lua`` as greenlets of
two processes' caps see it, the largest rates and tracker counts the
settings allow, malformed calls; then three ``peercrawl worker`` processes
against a real opentracker, counting the requests it receives.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time

import gevent
import pytest
import redis

from crawler.envparse import MAX_ANNOUNCE_RATE, MIN_ANNOUNCE_RATE
from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.source_settings import TrackerSpec
from crawler.sources.cap_report import cap_report
from crawler.sources.rate_budget import RateBudget
from crawler.store import scripts
from tests.cap_places import Places, gaps
from tests.cli import run_json
from tests.opentracker import opentracker  # noqa: F401 (fixture)

A, B, C = "udp://a.example:1/announce", "udp://b.example:2/announce", "udp://c.example:3/announce"


def visits(cap: RateBudget, urls: list[str], rounds: int) -> list[dict[str, float]]:
    """``rounds`` visits' asks to ``urls``, each announcing when told (sleeping its wait, then asking
    again); the waits each was given."""
    given = []
    for _ in range(rounds):
        waits = cap.take(urls)
        given.append(waits)
        gevent.sleep(max(waits.values()))
    return given


def test_two_processes_share_one_evenly_spaced_schedule(redis_url, client, keys, settings):
    s = settings.replace(max_announces_per_second=200.0)
    caps = [RateBudget.announce_cap(redis.Redis.from_url(redis_url), keys, s) for _ in range(2)]
    places = [Places(cap) for cap in caps]
    jobs = [gevent.spawn(visits, caps[i % 2], [A, B] if i % 2 else [C], 4) for i in range(40)]
    gevent.joinall(jobs, raise_error=True)
    assert sum(len(j.value) for j in jobs) == 40 * 4  # every visit answered
    # Places in Redis's clock (tests/cap_places.py), not send times read here: a busy machine's
    # late replies would move those by milliseconds.
    at = [(p.at, i) for i, pl in enumerate(places) for p in pl.requests]
    assert len(at) == (20 * 4 * 2 + 20 * 4) * 2  # every request placed: an announce and its withdrawal each
    spaced = gaps([t for t, _ in at])
    # 200 requests/s: one every 5 ms, never two closer, whichever process asked; a busy machine can only
    # leave the schedule idle now and then (a gap longer than one interval)
    assert min(spaced) == 5000 and statistics.median(spaced) == 5000
    owners = [i for _, i in sorted(at)]
    assert sum(a != b for a, b in zip(owners, owners[1:])) >= 2  # interleaved: each has places amid the other's
    assert caps[0]._commit.batches > 1 and caps[1]._commit.batches > 1  # both really asked
    report = cap_report(client, keys, s, time.time())
    assert report["per_second"] == 200.0 and report["limiting"]
    # one ask per visit (asks of one turn share a call): nobody polls
    assert caps[0]._commit.units + caps[1]._commit.units == len(at)
    assert report["trackers"] == {}


def test_a_trackers_own_cap_spaces_its_requests_and_leaves_the_others_alone(client, keys, settings):
    s = settings.replace(max_announces_per_second=1000.0, trackers=(TrackerSpec(A, 50, 20.0), TrackerSpec(B, 50)))
    cap = RateBudget.announce_cap(client, keys, s)
    placed = Places(cap)
    to_both = [gevent.spawn(visits, cap, [A, B], 3) for _ in range(4)]
    to_b = [gevent.spawn(visits, cap, [B], 20) for _ in range(4)]
    gevent.joinall(to_both + to_b, raise_error=True)
    at_a = [p.at for p in placed.requests if p.url == A]
    # 20 requests/s to A: one every 50 ms in Redis's clock, never closer; 12 visits, two requests each
    assert len(at_a) == 24 and min(gaps(at_a)) == 50_000 and statistics.median(gaps(at_a)) == 50_000
    # requests to B wait only for the namespace's 1,000/s (one every ms), never for A's schedule: a visit
    # to B alone is given at most the namespace's queue (the 24 requests the 8 greenlets ask at most, 24 ms)
    at_b = [p.at for p in placed.requests if p.url is None]
    assert len(at_b) == 12 * 2 + 80 * 2 and min(gaps(at_b)) >= 1000
    assert max(w[B] for j in to_b for w in j.value) < 0.05
    report = cap_report(client, keys, s, time.time())
    assert report["trackers"][A]["per_second"] == 20.0
    assert list(report["trackers"]) == [A]


def test_visits_queue_in_the_order_asked_each_sleeping_once(client, keys, settings):
    s = settings.replace(max_announces_per_second=10.0)
    cap = RateBudget.announce_cap(client, keys, s)
    minute = int(time.time()) // 60
    jobs = [gevent.spawn(visits, cap, [A], 1) for _ in range(12)]
    gevent.joinall(jobs, raise_error=True)
    assert cap._commit.batches == 1  # asked together, answered together: one clock for every wait
    # 24 requests at 10/s, in the order asked: visit i's announce waits 0.2 i s, its withdrawal 0.1 s more
    assert [j.value[0][A] for j in jobs] == [pytest.approx(0.2 * i, abs=1e-6) for i in range(12)]
    assert cap._commit.units == 24  # one ask per visit: nobody polls
    figures: dict[str, int] = {}  # the minute they asked in (the next too, should it have begun meanwhile)
    for m in (minute, minute + 1):
        for k, v in client.hgetall(keys.announce_cap_minute(m)).items():
            figures[k.decode()] = figures.get(k.decode(), 0) + int(v)
    assert figures["sent"] == 24 and figures["held"] >= 20
    assert figures["wait_us"] == pytest.approx(sum(0.4e6 * i + 0.1e6 for i in range(12)), rel=0.01)
    report = cap_report(client, keys, s, time.time())
    assert report["limiting"] and report["mean_wait_s"] > 0.5


def test_no_cap_means_no_redis_and_no_wait(client, keys, settings):
    cap = RateBudget.announce_cap(client, keys, settings)
    assert not cap.enabled
    assert cap.take([A, B]) == {A: 0.0, B: 0.0}
    assert not client.exists(keys.announce_cap)
    assert cap_report(client, keys, settings, time.time()) is None


def test_the_largest_rate_spaces_requests_by_ten_microseconds(client, keys, settings):
    s = settings.replace(max_announces_per_second=MAX_ANNOUNCE_RATE)
    cap = RateBudget.announce_cap(client, keys, s)
    answers = cap._serve([((A,), 2)] * 1000)
    waits = [round(g[0] * 1e6) for g in answers]
    first = waits[0]
    assert waits == [first + 20 * i for i in range(1000)]  # two requests of 10 µs per visit


def test_the_most_trackers_a_torrent_may_have_each_at_the_slowest_rate(client, keys, settings):
    n = 10_000  # PEERCRAWL_MAX_TRACKERS_PER_TORRENT's largest value
    urls = [f"udp://t{i}.example:1/announce" for i in range(n)]
    s = settings.replace(trackers=tuple(TrackerSpec(u, 50, MIN_ANNOUNCE_RATE) for u in urls),
                         max_trackers_per_torrent=n)
    cap = RateBudget.announce_cap(client, keys, s)
    granted = cap.take(urls)
    assert len(granted) == n and set(granted.values()) == {0.0}
    assert client.hlen(keys.announce_cap) == n
    # each tracker's next request is 2 x 1000 s away: a second visit is given its place there
    (again,) = cap._serve([(tuple(urls[:3]), 2)])
    assert again == [pytest.approx(2000.0, abs=1.0)] * 3


def test_a_batchs_announces_to_one_tracker_each_take_a_place(client, keys, settings):
    # a runner's batch asks for a tracker's places at once: each announce its own, in order
    s = settings.replace(trackers=(TrackerSpec(A, 50, 100.0),))
    cap = RateBudget.announce_cap(client, keys, s)
    before = time.time()
    waits = cap.take_each([A, B, A, A])
    assert waits[1] == 0.0  # B has no rate of its own, nor the namespace
    assert [round(w * 1e6) for w in (waits[2] - waits[0], waits[3] - waits[2])] == [20_000, 20_000]
    # ``take`` of one tracker's URL gives the wait of its first request, as it always did: the place
    # after the batch's last, less the time that passed between the two calls (at most ``elapsed``)
    got = cap.take([A])[A]
    elapsed = time.time() - before
    assert waits[3] + 0.02 - elapsed - 0.001 <= got <= waits[3] + 0.02 + 0.001


@pytest.mark.parametrize("args, message", [
    (["x", 0, 0], "interval is not a whole number"),
    ([-1, 0, 0], "interval is not a whole number"),
    ([5000, 1, A, 0, 1, 2, 1, 1], "interval of udp://a.example:1/announce"),
    ([5000, 0, 1, 2, 0, 1], "tracker number 1 of 0"),
    ([5000, 0, 1, 2, 0, 0, 7], "1 arguments left over"),
    ([5000, 0, 1, 0], "request count"),
    ([5000, 0, 2, 1, 0], "request count"),
])
def test_a_malformed_call_writes_nothing(client, keys, args, message):
    script = scripts.register(client, "rate_budget", package="crawler.sources")
    with pytest.raises(redis.ResponseError, match=message):
        script(keys=[keys.announce_cap, keys.announce_cap_minute(1)], args=args)
    assert not client.exists(keys.announce_cap) and not client.exists(keys.announce_cap_minute(1))


def test_settings_name_what_is_wrong():
    s = Settings.from_env({"PEERCRAWL_TRACKERS": f"{A}||2.5,{B}|80,{C}|90|0.5",
                           "PEERCRAWL_MAX_ANNOUNCES_PER_SECOND": "40"})
    assert s.trackers == (TrackerSpec(A, 200, 2.5), TrackerSpec(B, 80), TrackerSpec(C, 90, 0.5))
    assert s.max_announces_per_second == 40.0 and s.tracker_rates() == {A: 2.5, C: 0.5}
    for env, where in (({"PEERCRAWL_MAX_ANNOUNCES_PER_SECOND": "0"}, "PEERCRAWL_MAX_ANNOUNCES_PER_SECOND"),
                       ({"PEERCRAWL_MAX_ANNOUNCES_PER_SECOND": "nan"}, "PEERCRAWL_MAX_ANNOUNCES_PER_SECOND"),
                       ({"PEERCRAWL_MAX_ANNOUNCES_PER_SECOND": "100001"}, "PEERCRAWL_MAX_ANNOUNCES_PER_SECOND"),
                       ({"PEERCRAWL_TRACKERS": f"{A}|10|fast"}, "rate of udp://a.example:1/announce")):
        with pytest.raises(SettingsError, match=where) as e:
            Settings.from_env(env)
        assert "\n" not in str(e.value)


def _workers(env: dict, n: int, logs) -> list[subprocess.Popen]:
    """``n`` worker processes crawling until stopped (``_stop``); each one's stderr in a file of ``logs``
    (a pipe nobody reads while they run would fill and stall them)."""
    procs = []
    for i in range(n):
        with open(logs / f"worker{i}.log", "w") as err:
            procs.append(subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "16",
                                           "--duration", "300"], env=env, stdout=subprocess.DEVNULL, stderr=err))
    return procs


def _stop(workers: list[subprocess.Popen]) -> None:
    """SIGTERM to each worker, which drains and exits; the stragglers killed after 60 s."""
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(60)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def _until(condition, seconds: float, what: str):
    """``condition()``'s first true value, asked every 0.2 s; fails naming ``what`` after ``seconds``."""
    end = time.monotonic() + seconds
    while not (got := condition()):
        assert time.monotonic() < end, f"{what}: not within {seconds:g} s"
        time.sleep(0.2)
    return got


def _window(seconds: float, *counts):
    """(elapsed, each of ``counts()``'s growth) over about ``seconds``. The rates measured are the point of
    the tests using it: each end is stamped as its counts arrive, so the window is what they span."""
    before = [c() for c in counts]
    t1 = time.monotonic()
    time.sleep(seconds)
    after = [c() for c in counts]
    return (time.monotonic() - t1, *(y - x for x, y in zip(before, after)))


@pytest.mark.slow
def test_three_workers_hold_the_cap_at_the_tracker(opentracker, client, keys, test_env, tmp_path):  # noqa: F811
    """What opentracker receives from three worker processes stays within 10 % of the cap."""
    hashes = ["%040x" % (7 * 10**11 + i) for i in range(300)]
    ot = opentracker(hashes)
    ot.announce_many("127.1.0.1", hashes, 7000)  # one peer each: the torrents stay tracked
    rate = 60.0
    env = {**test_env, "PEERCRAWL_TRACKERS": ot.udp_url, "PEERCRAWL_MAX_ANNOUNCES_PER_SECOND": str(rate),
           "PEERCRAWL_REVISIT_SECONDS": "0"}
    p, out = run_json(env, "add", *hashes)
    assert p.returncode == 0 and out["added"] == 300
    workers = _workers(env, 3, tmp_path)
    try:
        # The window is measured while all three crawl, however slow they were to start: they run until
        # stopped, and it opens once the tracker received two seconds' worth (every greenlet queued).
        _until(lambda: len(run_json(env, "status")[1]["workers"]) == 3, 60, "three workers registered")
        first = ot.udp_announces()
        _until(lambda: ot.udp_announces() >= first + 2 * rate, 60, "announces at the tracker")
        took, n = _window(8.0, ot.udp_announces)
        _, status = run_json(env, "status")
    finally:
        _stop(workers)
    for i, w in enumerate(workers):
        assert w.returncode == 0, (tmp_path / f"worker{i}.log").read_text()[-2000:]
    received = n / took
    assert abs(received - rate) <= 0.1 * rate, received
    cap = status["announce_cap"]
    assert cap["per_second"] == rate and cap["limiting"]
    assert status["capacity"]["limited_by"] == "announce cap"
    assert 0 < cap["sent_per_second"] <= rate * 1.02  # over this minute and the last, idle start included


@pytest.mark.slow
def test_a_trackers_own_cap_holds_at_that_tracker(opentracker, test_env, tmp_path):  # noqa: F811
    """A tracker capped in PEERCRAWL_TRACKERS (``URL||RATE``) receives its rate; another one the same."""
    hashes = ["%040x" % (8 * 10**11 + i) for i in range(200)]
    capped, free = opentracker(hashes), opentracker(hashes)
    for ot in (capped, free):
        ot.announce_many("127.1.0.1", hashes, 7000)
    rate = 16.0
    # both list the same peer: mirrors off, so every visit asks both (what the pace below is about)
    env = {**test_env, "PEERCRAWL_TRACKERS": f"{capped.udp_url}||{rate:g},{free.udp_url}",
           "PEERCRAWL_REVISIT_SECONDS": "0", "PEERCRAWL_ASK_MIRRORS_ONCE": "off"}
    assert run_json(env, "add", *hashes)[1]["added"] == 200
    before = capped.udp_announces(), free.udp_announces()  # the fixture's probes and the peer's
    workers = _workers(env, 1, tmp_path)
    try:
        # as above: measured while the worker crawls, however long it took to start
        first = capped.udp_announces()
        _until(lambda: capped.udp_announces() >= first + 2 * rate, 60, "announces at the capped tracker")
        took, n = _window(6.0, capped.udp_announces)
        status = run_json(env, "status")[1]
    finally:
        _stop(workers)
    assert workers[0].returncode == 0, (tmp_path / "worker0.log").read_text()[-2000:]
    assert abs(n / took - rate) <= 0.1 * rate, n / took
    # Every visit asks both, so the free one is held to the same pace (contract §3: visits wait): it
    # received what the capped one did, visit for visit. Counted over the whole crawl, not as a rate:
    # the free one's announces come in bursts (the visits a scrape of the capped tracker gathered are
    # free to announce there at once), one every queue's length (2 s here), which a window of a few
    # seconds catches two or three of.
    assert free.udp_announces() - before[1] == capped.udp_announces() - before[0]
    cap = status["announce_cap"]
    assert cap["per_second"] is None and cap["limiting"]
    assert list(cap["trackers"]) == [capped.udp_url] and cap["trackers"][capped.udp_url]["limiting"]


def test_the_plan_says_what_revisit_interval_the_caps_allow():
    from crawler.sources.cap_report import plan_report

    cap = {"per_second": None, "sent_per_second": 63.0, "window_s": 100.0,
           "trackers": {"udp://a.example:1/announce": {"per_second": 10.0, "sent_per_second": 6.3},
                        "udp://b.example:1/announce": {"per_second": None, "sent_per_second": 6.3}}}
    # 1,000 visits in the window: 10 a second, 0.63 requests per visit at the capped tracker
    plan = plan_report(cap, 1000, 1_000_000, 1800.0)
    a = plan["caps"]["udp://a.example:1/announce"]
    assert list(plan["caps"]) == ["udp://a.example:1/announce"]  # an uncapped tracker needs no plan
    assert a["requests_per_visit"] == 0.63 and a["needed_per_second"] == pytest.approx(350.0)
    assert not a["enough"] and not plan["enough"]
    assert a["revisit_seconds"] == plan["revisit_seconds_really"] == 63_000  # 1,000,000 x 0.63 / 10
    small = plan_report(cap, 1000, 20_000, 1800.0)
    assert small["enough"] and small["revisit_seconds_really"] == 1800
    # the namespace's cap is a cap like a tracker's
    both = plan_report({**cap, "per_second": 20.0}, 1000, 1_000_000, 1800.0)
    assert both["caps"]["*"]["requests_per_visit"] == 6.3 and both["revisit_seconds_really"] == 315_000
    # nothing to say without a cap, a visit in the window, or a finite plan
    assert plan_report(None, 1000, 10, 1800.0) is None
    assert plan_report(cap, 0, 10, 1800.0) is None and plan_report(cap, 1000, 10, 0.0) is None


@pytest.mark.slow
def test_status_says_when_a_trackers_cap_is_short_of_the_plan(opentracker, test_env):  # noqa: F811
    hashes = ["%040x" % (9 * 10**11 + i) for i in range(60)]
    ot = opentracker(hashes)
    ot.announce_many("127.1.0.1", hashes, 7000)  # one peer each: every visit announces and withdraws
    rate = 5.0
    # 60 torrents every 10 s at ~2 requests each: ~12 requests/s wanted of a tracker capped at 5
    env = {**test_env, "PEERCRAWL_TRACKERS": f"{ot.udp_url}||{rate:g}", "PEERCRAWL_REVISIT_SECONDS": "10"}
    assert run_json(env, "add", *hashes)[1]["added"] == 60
    worker = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "16", "--duration", "8"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    worker.wait(60)
    assert worker.returncode == 0, worker.stderr.read()[-2000:]
    p, status = run_json(env, "status")
    plan = status["plan"]
    c = plan["caps"][ot.udp_url]
    assert not plan["enough"] and not c["enough"] and c["per_second"] == rate
    assert 1.9 <= c["requests_per_visit"] <= 2.2  # an announce and its withdrawal, and a share of a scrape
    # what the cap allows: 60 torrents x ~2 requests / 5 per second, against the 10 s asked for
    assert c["revisit_seconds"] == plan["revisit_seconds_really"]
    assert 22 <= plan["revisit_seconds_really"] <= 27
    text = subprocess.run([sys.executable, "-m", "crawler", "status"], env=env, capture_output=True, text=True).stdout
    assert f"{ot.udp_url} is short" in text and "really revisited every" in text
