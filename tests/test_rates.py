"""Operator rates (serve rate, reclaim rate, round trip) against counts the test keeps."""

from __future__ import annotations

import hashlib
import time

import pytest

from crawler.queue.queue import Queue
from crawler.queue.rates import STEPS, bucket, middle, percentile
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.cli import run_json


def hashes(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


@pytest.mark.parametrize("shards", [1, 3])
def test_status_rates_equal_what_the_claims_and_completions_did(client, namespace, settings, test_env, shards):
    keys = layout.resolve(client, namespace, shards)  # recorded, so the command sees the same shards
    assert keys.shards == shards
    s = settings.replace(queue_shards=shards, lease_seconds=60.0)
    q = Queue(client, keys, s)
    assert q.add([NewItem(h) for h in hashes(10)]) == ["added"] * 10
    t0 = time.time() + 1  # the torrents are due from their add; the command reads the real clock
    asked = served = 0
    leases = []
    for n, at in ((4, t0), (20, t0 + 1), (3, t0 + 2)):  # 10 torrents: 4, then the other 6, then none
        got = q.claim(n, now=at)
        asked, served = asked + n, served + len(got)
        leases += got
    assert served == 10
    trips = [0.5, 1.0, 2.0, 4.0, 30.0]
    for lease, rt in zip(leases, trips):
        state, _ = q.complete(lease, Outcome.SOME, peers=1, now=lease.claimed + rt)
        assert state == "cooling"
    # the other five leases expire; the next claim puts them back (reclaims) and takes one
    got = q.claim(1, now=t0 + 100)
    asked, served = asked + 1, served + len(got)
    assert len(got) == 1
    reclaimed = 5

    rates = QueueView(client, keys).rates(now=t0 + 200)
    assert (rates["claims_asked"], rates["claims_served"], rates["leases_reclaimed"]) == (asked, served, reclaimed)
    assert rates["claim_serve_rate"] == round(served / asked, 4)
    assert rates["reclaim_rate"] == round(reclaimed / served, 4)
    rt = rates["visit_round_trip_s"]
    assert rt["visits"] == 5
    assert rt["p50"] == pytest.approx(2.0, rel=0.045) and rt["p95"] == pytest.approx(30.0, rel=0.045)

    p, status = run_json(test_env, "status")  # the command shows the same, over the real last hour
    assert p.returncode == 0, p.stderr
    assert status["rates"] == rates


def test_minutes_leave_the_window_after_an_hour_and_are_trimmed_after_two(client, keys, settings):
    q = Queue(client, keys, settings)
    q.add([NewItem(h) for h in hashes(3, "old")])
    t0 = 1_900_000_000.0
    (lease,) = q.claim(1, now=t0)
    q.complete(lease, Outcome.SOME, now=t0 + 3)
    view = QueueView(client, keys)
    assert view.rates(now=t0 + 3500)["claims_served"] == 1
    later = view.rates(now=t0 + 3661)  # a minute counts while it began within the hour
    assert (later["claims_asked"], later["claim_serve_rate"], later["visit_round_trip_s"]["p50"]) == (0, None, None)
    assert client.hlen(keys.rates) == 3  # a, s and one round-trip bucket
    q.trim_visit_buckets(now=t0 + 2 * 3600 + 120)
    assert client.hlen(keys.rates) == 0


def test_a_lease_without_a_claim_time_counts_no_round_trip(client, keys, settings):
    from dataclasses import replace

    q = Queue(client, keys, settings)
    q.add([NewItem(h) for h in hashes(1, "x")])
    (lease,) = q.claim(1)
    q.complete(replace(lease, claimed=0.0), Outcome.SOME)
    assert QueueView(client, keys).rates()["visit_round_trip_s"]["visits"] == 0


def test_a_round_trip_ends_when_the_completion_is_sent_not_when_the_sources_answered(client, keys, settings):
    # a worker's visit time (``now``) is taken when its sources answer; its recording comes after,
    # and the slot is held until the completion leaves (``sent``)
    from dataclasses import replace

    q = Queue(client, keys, settings)
    q.add([NewItem(h) for h in hashes(1, "sent")])
    (lease,) = q.claim(1)
    claimed = time.time() - 10
    q.complete(replace(lease, claimed=claimed), Outcome.SOME, now=claimed + 0.5, sent=claimed + 4.0)
    rt = QueueView(client, keys).rates()["visit_round_trip_s"]
    assert rt["visits"] == 1 and rt["p50"] == pytest.approx(4.0, rel=0.045)


def test_buckets_bound_a_percentile_to_four_and_a_half_percent():
    for seconds in (0.0011, 0.05, 0.999, 1.0, 2.5, 29.9, 30.0, 3600.0):
        k = bucket(seconds)
        assert 2 ** (k / STEPS) / 1000 <= seconds < 2 ** ((k + 1) / STEPS) / 1000
        assert middle(k) == pytest.approx(seconds, rel=0.045)
    assert bucket(0.0) == 0 and bucket(0.0004) == 0
    h = {bucket(x): 1 for x in (1.0, 2.0, 3.0, 4.0)}
    assert percentile(h, 0.5) == pytest.approx(2.0, rel=0.045)
    assert percentile({}, 0.5) is None
