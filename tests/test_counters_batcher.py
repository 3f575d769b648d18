"""Visits of many greenlets recorded together (crawler.counters.batcher), on the real Redis."""

from __future__ import annotations

import calendar
import random

import gevent
import gevent.event
import pytest
import redis

import geo
from crawler.counters import Recorder
from crawler.counters.batcher import IN_FLIGHT, MAX_IPS, Batcher
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.store.store import Store
from tests.interleaved_recorder import InterleavedRecorder
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.test_counters_concurrency import POOL
from tests.test_counters_shards import every_ranking

T0 = calendar.timegm((2024, 5, 30, 12, 0, 0))
TORRENTS = [f"{n:04x}" * 10 for n in range(40)]


@pytest.fixture
def locator(tmp_path):
    return geo.open_locator(write_city_db(tmp_path / "city.mmdb"))


def swarms(seed: int) -> list[list[str]]:
    """Overlapping swarms: many peers in several of them, as on a real crawl."""
    rng = random.Random(seed)
    return [rng.sample(POOL, rng.randint(1, 80)) for _ in TORRENTS]


@pytest.mark.parametrize("shards", [1, 3])
def test_visits_of_many_greenlets_are_recorded_in_few_batches_as_one_by_one(client, namespace, settings, locator,
                                                                            shards):
    one, together = Keys(namespace + "-one", shards), Keys(namespace + "-b", shards)
    try:
        alone = Recorder(client, one, settings.replace(namespace=one.namespace), locator)
        batcher = Batcher(Recorder(client, together, settings.replace(namespace=together.namespace), locator))
        for round_, now in enumerate((T0, T0 + 60, T0 + 40 * 86400)):  # first visits, revisits, a new window
            peers = swarms(round_)
            expected = [alone.record_visit(h, ips, now) for h, ips in zip(TORRENTS, peers)]
            jobs = [gevent.spawn(batcher.record_visit, h, ips, now) for h, ips in zip(TORRENTS, peers)]
            gevent.joinall(jobs, raise_error=True)
            assert [j.value for j in jobs] == expected
            assert sum(expected) > 0 or round_ == 1
        sizes = [sum(map(len, swarms(round_))) for round_ in range(3)]
        assert batcher.units == sum(sizes)  # a batch is sized by its peers
        # the visits queued behind the first ones shared batches of at most MAX_IPS peers (each
        # visit whole: a batch may end up to a visit's 80 peers short)
        assert batcher.batches <= sum(IN_FLIGHT + n // (MAX_IPS - 80) for n in sizes), batcher.batches
        assert batcher.batches < 3 * len(TORRENTS) // 2
        assert every_ranking(client, together, 50) == every_ranking(client, one, 50)
    finally:
        delete_namespace(client, one.namespace)
        delete_namespace(client, together.namespace)


@pytest.mark.interpreted
@pytest.mark.parametrize("shards", [1, 3])
def test_a_worker_store_sends_record_calls_in_round_trips_of_their_own(client, namespace, settings, locator, shards):
    # a worker's store shares round trips among its visits' short calls (a completion, a probe); a
    # recording's record and place calls (each milliseconds of Redis, already gathered by the
    # batch) would hold those behind them
    keys = Keys(namespace, shards)
    store = Store.coalesced(client)
    alone = Keys(namespace + "-one", shards)
    shared: list = []  # the scripts of the calls that went through the coalescer
    run = store.coalescer.run
    store.coalescer.run = lambda calls, wait=None: (shared.extend(c[0] for c in calls), run(calls, wait))[1]
    try:
        recorder = Recorder(store, keys, settings, locator)
        batcher = Batcher(recorder)
        short = client.register_script("return 1")  # a completion, say
        one = Recorder(client, alone, settings.replace(namespace=alone.namespace), locator)
        for now in (T0, T0 + 60):  # first visits (record calls, place calls), then revisits (probes)
            peers = swarms(7)
            jobs = [gevent.spawn(batcher.record_visit, h, ips, now) for h, ips in zip(TORRENTS, peers)]
            others = [gevent.spawn(store.run, [(short, [keys.counter_shard(0).outbox], [])]) for _ in range(5)]
            gevent.joinall(jobs + others, raise_error=True)
            assert [j.value for j in others] == [[1]] * 5
            assert [j.value for j in jobs] == [one.record_visit(h, ips, now) for h, ips in zip(TORRENTS, peers)]
        assert shared.count(short) == 10 and recorder._probe_script in shared
        places = recorder._place_shards.script if recorder._place_shards is not None else None
        assert recorder._record not in shared and (places is None or places not in shared)
        assert every_ranking(client, keys, 50) == every_ranking(client, alone, 50)
    finally:
        delete_namespace(client, namespace)
        delete_namespace(client, alone.namespace)


def test_a_bad_info_hash_fails_its_own_visit_only(client, keys, settings, locator):
    batcher = Batcher(Recorder(client, keys, settings, locator))
    jobs = [gevent.spawn(batcher.record_visit, h, POOL[:5], T0) for h in (TORRENTS[0], "not-a-hash", TORRENTS[1])]
    gevent.joinall(jobs)
    assert isinstance(jobs[1].exception, ValueError) and "not-a-hash" in str(jobs[1].exception)
    assert [jobs[0].value, jobs[2].value] == [5, 5]
    with pytest.raises(ValueError, match="does not fit a mark"):
        batcher.record_visit(TORRENTS[2], POOL[:5], -1.0)


def test_redis_failing_fails_every_visit_of_the_batch_and_the_next_batch_works(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    batcher = Batcher(rec)
    # Redis goes away: a client on a port where nothing listens, with no retries
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=None)
    rec.store, rec.client = Store(dead), dead
    jobs = [gevent.spawn(batcher.record_visit, h, POOL[:5], T0) for h in TORRENTS[:6]]
    gevent.joinall(jobs)
    assert all(isinstance(j.exception, StoreError) for j in jobs), [j.exception for j in jobs]
    assert not batcher.busy
    rec.store, rec.client = Store(client), client  # back: the visits are retried and count once
    jobs = [gevent.spawn(batcher.record_visit, h, POOL[:5], T0) for h in TORRENTS[:6]]
    gevent.joinall(jobs, raise_error=True)
    assert [j.value for j in jobs] == [5] * 6


@pytest.mark.interpreted
def test_a_batch_stopped_mid_way_fails_its_visits_and_the_next_ones_are_recorded(client, keys, settings, locator):
    rec = InterleavedRecorder(client, keys, settings, locator)
    batcher = Batcher(rec, in_flight=1)
    held = gevent.event.Event()
    rec.after_probe = lambda: (held.set(), gevent.sleep(30))
    jobs = [gevent.spawn(batcher.record_visit, h, POOL[:5], T0) for h in TORRENTS[:4]]
    held.wait(5)
    sender = [g for g in _greenlets() if g.args[:1] == (batcher._send,)]
    assert len(sender) == 1
    rec.after_probe = None
    sender[0].kill()
    gevent.joinall(jobs, timeout=5)
    assert all(isinstance(j.exception, StoreError) for j in jobs), [j.exception for j in jobs]
    assert not batcher.busy
    assert batcher.record_visit(TORRENTS[0], POOL[:5], T0) == 5  # nothing was recorded: all 5 are new


def _greenlets() -> list:
    import gc

    return [o for o in gc.get_objects() if isinstance(o, gevent.Greenlet) and not o.dead]


def test_a_batch_holds_at_most_max_ips_peers_and_a_larger_visit_goes_alone(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    batcher = Batcher(rec, max_ips=100, in_flight=1)
    sizes = [30] * 10 + [150, 30]
    jobs = [gevent.spawn(batcher.record_visit, h, POOL[:n], T0) for h, n in zip(TORRENTS, sizes)]
    gevent.joinall(jobs, raise_error=True)
    # queued together: three visits of 30 a batch (90 peers), then the 150 alone, then the last 30
    assert [j.value for j in jobs] == sizes
    assert (batcher.batches, batcher.units) == (6, sum(sizes))


@pytest.mark.interpreted
@pytest.mark.parametrize("shards", [1, 3])
def test_a_batchs_visits_are_noted_for_torrents_processed_in_one_call_a_shard_and_hour(client, namespace, settings,
                                                                                        locator, shards):
    keys = Keys(namespace, shards)
    rec = Recorder(client, keys, settings.replace(stathat_ezkey="k"), locator)
    calls: list = []  # per round trip noting visits: its visited.lua calls
    run, script = rec.store.run, rec.processed.script
    rec.store.run = lambda c, *a, **kw: (calls.extend([sum(x[0] is script for x in c)] if any(
        x[0] is script for x in c) else []), run(c, *a, **kw))[1]
    batcher = Batcher(rec, in_flight=1)
    hour = (T0 // 3600 + 1) * 3600
    # two hours: the visits of one batch on either side of an hour's start are noted in each
    visits = [(h, hour - 1 if i % 2 else hour + 1, i % 3 != 0) for i, h in enumerate(TORRENTS[:12])]
    jobs = [gevent.spawn(batcher.record_visit, h, POOL[:3], now, False, noted) for h, now, noted in visits]
    gevent.joinall(jobs, raise_error=True)
    noted = [v for v in visits if v[2]]
    # one round trip a batch, one call in it a shard and hour
    assert len(calls) == batcher.batches and max(calls) <= 2 * shards
    outbox = sum(int(client.hget(k.outbox, "torrents.processed") or 0) for k in keys.all_counter_shards)
    assert outbox == len(noted)
    # noted again in the same hours: nothing more counts, one call a shard and hour each time
    again = [gevent.spawn(batcher.record_visit, h, POOL[:3], now, True, True) for h, now, _ in visits]
    gevent.joinall(again, raise_error=True)
    outbox = sum(int(client.hget(k.outbox, "torrents.processed") or 0) for k in keys.all_counter_shards)
    assert outbox == len(visits)
