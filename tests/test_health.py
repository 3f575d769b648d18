"""Tracker health in the real Redis: backoff after consecutive failures, shared, recovered."""

from __future__ import annotations

import os

from crawler.sources.trackers.health import TrackerHealth
from crawler.sources.trackers.health_report import tracker_others, tracker_report
from crawler.sources.trackers.trackers import Trackers
from tests.hostile import UDP_GOOD, UDP_SILENT, HostileUdpTracker


def test_backoff_doubles_up_to_max_and_recovers(client, keys):
    h = TrackerHealth(client, keys, base=10, maximum=35, threshold=2, refresh=0)
    url = "udp://t.example:1"
    h.record(url, False)
    assert h.backing_off_until(url) is None  # one failure is not a pattern
    waits = []
    for _ in range(4):
        h.record(url, False)
        st = tracker_report(client, keys, 20)[url]
        assert st["backing_off"]
        waits.append(st["until"])
    import time

    now = time.time()
    assert [round(w - now) for w in waits] == [10, 20, 35, 35]
    other = TrackerHealth(client, keys, base=10, maximum=35, threshold=2, refresh=0)
    assert other.backing_off_until(url) is not None  # shared by every worker
    other.record(url, True)  # recovery is written at once
    assert h.backing_off_until(url) is None
    rep = tracker_report(client, keys, 20)[url]
    assert {k: rep[k] for k in ("answers", "failures", "refusals", "backing_off", "until")} == {
        "answers": 1, "failures": 5, "refusals": 0, "backing_off": False, "until": None}


def test_answers_are_batched_then_flushed(client, keys):
    h = TrackerHealth(client, keys, flush=3600)
    for _ in range(5):
        h.record("udp://a:1", True)
    assert tracker_report(client, keys, 20) == {}
    h.flush()
    assert tracker_report(client, keys, 20)["udp://a:1"]["answers"] == 5


def test_a_closed_health_records_nothing_more(client, keys):
    # a request that outlives its process's trackers (a scrape group still waiting at a stop) ends after
    # the last flush: its failure, which is written at once, must not land in a namespace cleared since
    h = TrackerHealth(client, keys, flush=3600)
    h.record("udp://a:1", True)
    h.close()
    assert tracker_report(client, keys, 20)["udp://a:1"]["answers"] == 1
    client.delete(keys.tracker_health, keys.tracker_used, keys.tracker_rank, keys.tracker_totals)
    h.record("udp://a:1", False, message="late")
    h.record("udp://b:2", True)
    assert not client.exists(keys.tracker_health, keys.tracker_used, keys.tracker_rank, keys.tracker_totals)


def test_backing_off_tracker_skipped_without_traffic(settings, client, keys):
    tr = HostileUdpTracker()
    t = Trackers(settings.replace(udp_timeout=0.2, udp_retries=1, tracker_backoff_base=60, tracker_backoff_after=2),
                 client, keys)
    try:
        silent = (bytes([UDP_SILENT]) + os.urandom(19)).hex()
        good = (bytes([UDP_GOOD]) + os.urandom(19)).hex()
        for _ in range(2):
            r = t.announce(tr.url, silent)
            assert not r.ok and "TrackerTimeout" in r.error
        sent = t.udp.announces_sent
        t.health.refresh = 0
        r = t.announce(tr.url, good)
        assert not r.ok and "backing off" in r.error
        assert t.udp.announces_sent == sent  # no network traffic
        report = tracker_report(client, keys, 20)[tr.url]
        assert report["backing_off"] and report["failures"] == 2
    finally:
        t.close()
        tr.close()


def test_refusal_counts_as_alive(settings, client, keys):
    from tests.hostile import UDP_ERROR

    tr = HostileUdpTracker()
    t = Trackers(settings.replace(udp_timeout=0.2, tracker_backoff_after=1), client, keys)
    try:
        r = t.announce(tr.url, (bytes([UDP_ERROR]) + os.urandom(19)).hex())
        assert not r.ok and "go away" in r.error
        t.health.flush()
        rep = tracker_report(client, keys, 20)[tr.url]
        assert (rep["failures"], rep["answers"], rep["refusals"], rep["backing_off"]) == (0, 0, 1, False)
        assert rep["last_refusal"] == "tracker error: go away"
    finally:
        t.close()
        tr.close()


def test_health_script_refuses_bad_arguments_before_any_write_and_reads_old_entries(client, keys):
    import json

    import pytest
    import redis

    h = TrackerHealth(client, keys)
    url = "udp://old.example:1/announce"
    # An entry written before refusals, cuts and caps existed.
    client.hset(keys.tracker_health, url, json.dumps({"answers": 3, "failures": 1, "streak": 1, "until": 0}))
    args = [url, 0, 0, "none", 1.0, 60, 3600, 2, 0, "", 0, 0, 0, 86400]
    for i, bad in ((2, "x"), (4, "maybe"), (12, "nan"), (3, "1.5"), (9, "-1")):
        wrong = list(args)
        wrong[i - 1] = bad
        with pytest.raises(redis.ResponseError, match="tracker_health"):
            h._script(keys=[keys.tracker_health, keys.tracker_used, keys.tracker_rank, keys.tracker_totals],
                      args=wrong)
    assert client.zcard(keys.tracker_used) == 0 and not client.exists(keys.tracker_totals)  # nothing written
    h.record(url, "refusal", message="tracker error: unregistered")
    h.flush()
    rep = tracker_report(client, keys, 20)[url]
    assert (rep["answers"], rep["failures"], rep["refusals"], rep["last_refusal"]) == (
        3, 1, 1, "tracker error: unregistered")
    assert json.loads(client.hget(keys.tracker_health, url))["streak"] == 0  # a refusal is a sign of life
    # ranked at its first write: its whole counts, not only this write's, join the others' sums
    assert client.zscore(keys.tracker_rank, url) == 5
    assert tracker_others(client, keys, {}) == {"trackers": 1, "answers": 3, "failures": 1, "refusals": 1,
                                                 "peers_cut": 0}


def test_a_learned_cap_rises_at_once_and_falls_only_when_left_unconfirmed(client, keys):
    import time

    url = "udp://capped.example:1/announce"
    h = TrackerHealth(client, keys, refresh=0, flush=0, cap_confirm=0.5)
    h.record(url, "answer", returned=82, capped=True)
    assert h.cap(url) == 82
    h.record(url, "answer", returned=40, capped=True)  # a short reply for another reason
    assert h.cap(url) == 82
    h.record(url, "answer", returned=90)  # more than the cap: it was higher
    assert h.cap(url) == 90
    time.sleep(0.6)
    h.record(url, "answer", returned=90, capped=True)  # confirmed again
    h.record(url, "answer", returned=50, capped=True)
    assert h.cap(url) == 90
    time.sleep(0.6)  # nothing confirms 90 any more: the operator lowered it
    h.record(url, "answer", returned=50, capped=True)
    assert h.cap(url) == 50 and tracker_report(client, keys, 20)[url]["learned_cap"] == 50


def test_entries_from_before_the_index_are_indexed_then_pruned(client, keys):
    import json
    import time

    client.hset(keys.tracker_health, "udp://legacy.example:1/announce",
                json.dumps({"answers": 1, "failures": 0, "streak": 0, "until": 0}))
    h = TrackerHealth(client, keys, prune_after=0.3)
    assert h.prune() == 0  # indexed as used now: a whole prune_after to go
    assert client.zscore(keys.tracker_used, "udp://legacy.example:1/announce") is not None
    time.sleep(0.4)
    assert h.prune() == 1 and client.hlen(keys.tracker_health) == 0 and client.zcard(keys.tracker_used) == 0


def test_a_stale_state_is_read_again_by_one_greenlet_while_the_others_keep_it(client, keys):
    """When ``refresh`` lapses, the greenlets asking at that moment send one HGET, not one each."""
    import gevent
    import redis

    class Slow(redis.Redis):
        """A client whose HGET yields first, as one waiting on the network would."""

        hgets = 0

        def hget(self, name, key):
            Slow.hgets += 1
            gevent.sleep(0.01)
            return super().hget(name, key)

    slow = Slow(connection_pool=client.connection_pool)
    h = TrackerHealth(slow, keys, base=10, threshold=1, refresh=0.05, flush=0)
    url = "udp://t.example:1"
    assert h.backing_off_until(url) is None and Slow.hgets == 1
    other = TrackerHealth(client, keys, base=10, threshold=1, refresh=0)
    other.record(url, False)  # another worker backs it off
    gevent.sleep(0.06)
    answers = [g.value for g in gevent.joinall([gevent.spawn(h.backing_off_until, url) for _ in range(20)])]
    assert Slow.hgets == 2
    # the greenlet that read it sees the backoff; the others had the state it replaced
    assert sum(a is not None for a in answers) == 1
    assert h.backing_off_until(url) is not None and Slow.hgets == 2


def test_the_busiest_trackers_are_read_and_the_rest_summed(client, keys):
    h = TrackerHealth(client, keys, refresh=0, flush=3600)
    for i in range(30):
        for _ in range(i + 1):
            h.record(f"udp://busy{i}.example:1/announce", True, cut=1)
    h.record("udp://busy0.example:1/announce", False)
    h.flush()
    top = tracker_report(client, keys, limit=5)
    assert list(top) == [f"udp://busy{i}.example:1/announce" for i in (29, 28, 27, 26, 25)]
    rest = tracker_others(client, keys, top)
    answers = sum(range(1, 31))
    assert rest == {"trackers": 25, "answers": answers - sum(range(26, 31)), "failures": 1, "refusals": 0,
                    "peers_cut": answers - sum(range(26, 31))}
    assert tracker_report(client, keys, limit=0) == {}
