"""The announce cap (contract §3): tracker requests per second across every worker of a namespace.

Against the real Redis: the schedule of ``announce_cap.lua`` as greenlets of
two processes' caps see it, the largest rates and tracker counts the
settings allow, malformed calls; then three ``peercrawl worker`` processes
against a real opentracker, counting the requests it receives.
"""

from __future__ import annotations

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
from crawler.sources.announce_cap import AnnounceCap, cap_report
from crawler.store import scripts
from tests.cli import run_json
from tests.opentracker import opentracker  # noqa: F401 (fixture)

A, B, C = "udp://a.example:1/announce", "udp://b.example:2/announce", "udp://c.example:3/announce"


def visits(cap: AnnounceCap, urls: list[str], rounds: int, sends: list) -> None:
    """``rounds`` visits' asks to ``urls``, each announcing when told; each announce's send time
    (monotonic) into ``sends``."""
    for _ in range(rounds):
        waits = cap.take(urls)
        got = time.monotonic()
        sends.extend((got + w, u) for u, w in waits.items())
        gevent.sleep(max(waits.values()))


def most_in_a_second(times: list[float]) -> int:
    times = sorted(times)
    j, best = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_two_processes_share_one_evenly_spaced_schedule(redis_url, client, keys, settings):
    s = settings.replace(max_announces_per_second=200.0)
    caps = [AnnounceCap(redis.Redis.from_url(redis_url), keys, s) for _ in range(2)]
    sends: list = []
    jobs = [gevent.spawn(visits, caps[i % 2], [A, B] if i % 2 else [C], 4, sends) for i in range(40)]
    gevent.joinall(jobs, raise_error=True)
    times = sorted(t for t, _ in sends)
    assert len(times) == 20 * 4 * 2 + 20 * 4  # every announce granted
    # 200 requests/s, two per announce (itself and its withdrawal): 100 announces/s,
    # one every 10 ms. Each send time is the reply's arrival plus its wait, so a busy
    # machine's late replies add jitter (up to ~4 ms seen with the suite on both cores);
    # a cap that granted two places at once would leave a gap of ~0.
    assert min(b - a for a, b in zip(times, times[1:])) > 0.004
    assert most_in_a_second(times) <= 102
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert 95 <= rate <= 102
    assert caps[0]._commit.batches > 1 and caps[1]._commit.batches > 1  # both really asked
    report = cap_report(client, keys, s, time.time())
    assert report["per_second"] == 200.0 and report["limiting"]
    # one ask per visit (asks of one turn share a call): nobody polls
    assert caps[0]._commit.units + caps[1]._commit.units == len(times) * 2
    assert report["trackers"] == {}


def test_a_trackers_own_cap_spaces_its_requests_and_leaves_the_others_alone(client, keys, settings):
    s = settings.replace(max_announces_per_second=1000.0, trackers=(TrackerSpec(A, 50, 20.0), TrackerSpec(B, 50)))
    cap = AnnounceCap(client, keys, s)
    to_a: list = []
    to_b: list = []
    started = time.monotonic()
    jobs = [gevent.spawn(visits, cap, [A, B], 3, to_a) for _ in range(4)]
    jobs += [gevent.spawn(visits, cap, [B], 20, to_b) for _ in range(4)]
    gevent.joinall(jobs[4:], raise_error=True)
    b_done = time.monotonic() - started
    gevent.joinall(jobs, raise_error=True)
    a_times = sorted(t for t, u in to_a if u == A)
    # 20 requests/s to A, two per announce: one announce every 100 ms
    assert min(y - x for x, y in zip(a_times, a_times[1:])) > 0.095
    assert len(a_times) == 12 and 1.0 <= a_times[-1] - a_times[0] <= 1.2
    # visits to B alone wait only for the namespace's 1,000/s, not for A
    assert b_done < 0.6
    report = cap_report(client, keys, s, time.time())
    assert report["trackers"][A]["per_second"] == 20.0
    assert list(report["trackers"]) == [A]


def test_visits_queue_in_the_order_asked_each_sleeping_once(client, keys, settings):
    s = settings.replace(max_announces_per_second=10.0)
    cap = AnnounceCap(client, keys, s)
    sends: list = []
    started, minute_key = time.monotonic(), keys.announce_cap_minute(int(time.time()) // 60)
    gevent.joinall([gevent.spawn(visits, cap, [A], 1, sends) for _ in range(12)], raise_error=True)
    took = time.monotonic() - started
    times = sorted(t for t, _ in sends)
    # 24 requests at 10/s: the last announce goes 2.2 s after the first
    assert len(times) == 12 and 2.15 <= times[-1] - times[0] <= 2.3
    assert took <= 2.2 + 0.3  # nobody slept on past their turn
    assert cap._commit.batches == 1  # asked together, answered together
    minute = {k.decode(): int(v) for k, v in client.hgetall(minute_key).items()}  # the minute they asked in
    assert minute["sent"] == 24 and minute["held"] >= 20
    # each visit i waits 0.2 i s for its announce and 0.1 s more for its withdrawal
    assert minute["wait_us"] == pytest.approx(sum(0.4e6 * i + 0.1e6 for i in range(12)), rel=0.01)
    report = cap_report(client, keys, s, time.time())
    assert report["limiting"] and report["mean_wait_s"] > 0.5


def test_no_cap_means_no_redis_and_no_wait(client, keys, settings):
    cap = AnnounceCap(client, keys, settings)
    assert not cap.enabled
    assert cap.take([A, B]) == {A: 0.0, B: 0.0}
    assert not client.exists(keys.announce_cap)
    assert cap_report(client, keys, settings, time.time()) is None


def test_the_largest_rate_spaces_requests_by_ten_microseconds(client, keys, settings):
    s = settings.replace(max_announces_per_second=MAX_ANNOUNCE_RATE)
    cap = AnnounceCap(client, keys, s)
    answers = cap._serve([((A,), 2)] * 1000)
    waits = [round(g[A] * 1e6) for g in answers]
    first = waits[0]
    assert waits == [first + 20 * i for i in range(1000)]  # two requests of 10 µs per visit


def test_the_most_trackers_a_torrent_may_have_each_at_the_slowest_rate(client, keys, settings):
    n = 10_000  # PEERCRAWL_MAX_TRACKERS_PER_TORRENT's largest value
    urls = [f"udp://t{i}.example:1/announce" for i in range(n)]
    s = settings.replace(trackers=tuple(TrackerSpec(u, 50, MIN_ANNOUNCE_RATE) for u in urls),
                         max_trackers_per_torrent=n)
    cap = AnnounceCap(client, keys, s)
    granted = cap.take(urls)
    assert len(granted) == n and set(granted.values()) == {0.0}
    assert client.hlen(keys.announce_cap) == n
    # each tracker's next request is 2 x 1000 s away: a second visit is given its place there
    (again,) = cap._serve([(tuple(urls[:3]), 2)])
    assert again == {u: pytest.approx(2000.0, abs=1.0) for u in urls[:3]}


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
    script = scripts.register(client, "announce_cap", package="crawler.sources")
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
    workers = [subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "16",
                                 "--duration", "16"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for _ in range(3)]
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:  # every worker registered and announcing
            _, status = run_json(env, "status")
            if len(status["workers"]) == 3 and status["visits_last_hour"] > 0:
                break
            time.sleep(0.5)
        assert len(status["workers"]) == 3
        time.sleep(1.0)
        t1, n1 = time.monotonic(), ot.udp_announces()
        time.sleep(8.0)
        t2, n2 = time.monotonic(), ot.udp_announces()
        _, status = run_json(env, "status")
    finally:
        for w in workers:
            w.wait(60)
    for w in workers:
        assert w.returncode == 0, w.stderr.read()[-2000:]
    received = (n2 - n1) / (t2 - t1)
    assert abs(received - rate) <= 0.1 * rate, received
    cap = status["announce_cap"]
    assert cap["per_second"] == rate and cap["limiting"]
    assert status["capacity"]["limited_by"] == "announce cap"
    assert 0 < cap["sent_per_second"] <= rate * 1.02  # over this minute and the last, idle start included


@pytest.mark.slow
def test_a_trackers_own_cap_holds_at_that_tracker(opentracker, test_env):  # noqa: F811
    """A tracker capped in PEERCRAWL_TRACKERS (``URL||RATE``) receives its rate; another one the same."""
    hashes = ["%040x" % (8 * 10**11 + i) for i in range(200)]
    capped, free = opentracker(hashes), opentracker(hashes)
    for ot in (capped, free):
        ot.announce_many("127.1.0.1", hashes, 7000)
    rate = 16.0
    env = {**test_env, "PEERCRAWL_TRACKERS": f"{capped.udp_url}||{rate:g},{free.udp_url}",
           "PEERCRAWL_REVISIT_SECONDS": "0"}
    assert run_json(env, "add", *hashes)[1]["added"] == 200
    worker = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "16", "--duration", "12"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and run_json(env, "status")[1]["visits_last_hour"] == 0:
            time.sleep(0.5)
        time.sleep(1.0)
        t1, a1, b1 = time.monotonic(), capped.udp_announces(), free.udp_announces()
        time.sleep(6.0)
        t2, a2, b2 = time.monotonic(), capped.udp_announces(), free.udp_announces()
        status = run_json(env, "status")[1]
    finally:
        worker.wait(60)
    assert worker.returncode == 0, worker.stderr.read()[-2000:]
    at_capped, at_free = (a2 - a1) / (t2 - t1), (b2 - b1) / (t2 - t1)
    assert abs(at_capped - rate) <= 0.1 * rate, at_capped
    # every visit asks both, so the free one is held to the same pace (contract §3: visits wait)
    assert abs(at_free - rate) <= 0.15 * rate, at_free
    cap = status["announce_cap"]
    assert cap["per_second"] is None and cap["limiting"]
    assert list(cap["trackers"]) == [capped.udp_url] and cap["trackers"][capped.udp_url]["limiting"]


def test_the_plan_says_what_revisit_interval_the_caps_allow():
    from crawler.sources.announce_cap import plan_report

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
