"""Tracker health is pruned by what the torrents name: an entry unused for a period goes only when
no torrent that is not evicted names it, checked again in the step that removes it."""

from __future__ import annotations

import hashlib
import time

import pytest

from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.sources.trackers import health as health_module
from crawler.sources.trackers.health import ANSWER, FAILURE, TrackerHealth
from crawler.sources.trackers.health_report import tracker_others, tracker_report
from crawler.torrents.items import NewItem
from tests.test_cluster import cluster_ns  # noqa: F401 (fixture)

PERIOD = 60.0


def _h(i: int) -> str:
    return hashlib.sha1(f"prune-named-{i}".encode()).hexdigest()


def _url(name: str) -> str:
    return f"udp://{name}.prune.test:6969/announce"


def _claim_all(q: Queue, n: int, now: float) -> dict:
    """Lease every one of the queue's ``n`` torrents: info-hash -> lease."""
    leases = {}
    for _ in range(20):
        leases.update({x.info_hash: x for x in q.claim(n, now=now)})
        if len(leases) == n:
            return leases
    raise AssertionError(f"claimed {len(leases)} of {n} torrents")


def _evict(q: Queue, lease, now: float) -> None:
    """Evict a leased torrent the queue's own way: a visit without peers below the threshold."""
    state, _ = q.complete(lease, Outcome.NONE, now=now)
    assert state == "evicted"


@pytest.mark.parametrize("shards", [1, 3])
def test_prune_removes_trackers_no_torrent_names_and_keeps_the_named(client, namespace, settings, shards):
    keys = Keys(namespace, shards)
    s = settings.replace(evict_below=0.9)  # one visit without peers evicts
    q = Queue(client, keys, s)
    t0 = time.time()
    # A names t1 and t2, B names t2 and t3 (in several shards when sharded), C names t5 and is evicted;
    # t4 is named by nobody; "default" is a configured default tracker (every torrent asks it).
    a, b, c = _h(1), _h(2), _h(3)
    q.add([NewItem(a, (_url("t1"), _url("t2"))), NewItem(b, (_url("t2"), _url("t3"))),
           NewItem(c, (_url("t5"),))], now=t0)
    leases = _claim_all(q, 3, t0)
    _evict(q, leases[c], t0)
    h = TrackerHealth(client, keys, refresh=0, flush=3600, prune_after=PERIOD, named_always=(_url("default"),))
    for name in ("t1", "t2", "t3", "t4", "t5", "default"):
        h.record(_url(name), ANSWER, returned=1)
    h.record(_url("t4"), FAILURE)
    h.flush()
    assert len(tracker_report(client, keys, 20)) == 6

    later = time.time() + PERIOD + 1  # every entry unused for a whole period
    assert h.prune(now=later) == 2
    kept = set(tracker_report(client, keys, 20))
    assert kept == {_url(n) for n in ("t1", "t2", "t3", "default")}
    assert client.hlen(keys.tracker_health) == 4 and client.zcard(keys.tracker_rank) == 4
    # the named ones were found named at `later`: not candidates again for a whole period
    assert {u.decode() for u in client.zrangebyscore(keys.tracker_used, later, later)} == kept
    # the sums of the others follow: the pruned entries' counts left them
    others = tracker_others(client, keys, tracker_report(client, keys, limit=1))
    assert others == {"trackers": 3, "answers": 3, "failures": 0, "refusals": 0, "peers_cut": 0}

    # B evicted too: t3 is named by nobody now, t2 still by A
    _evict(q, leases[b], later)
    h.walk_every = 0
    assert h.prune(now=later + PERIOD + 1) == 1
    assert set(tracker_report(client, keys, 20)) == {_url(n) for n in ("t1", "t2", "default")}


def test_a_candidate_used_during_the_walk_is_kept(client, keys, settings, monkeypatch):
    """A torrent added while the walk runs names a candidate the walk did not see named; its first
    announce lands before the removal, and the removal's own check keeps the entry."""
    q = Queue(client, keys, settings)
    # real clocks here: the concurrent announce is written at the time it happens
    h = TrackerHealth(client, keys, refresh=0, flush=3600, prune_after=0.3)
    for name in ("again", "gone"):
        h.record(_url(name), ANSWER, returned=1)
    h.flush()
    time.sleep(0.4)  # both unused for a whole period
    walk = health_module.tracker_names.named

    def walk_then_a_worker_announces(client_, keys_, candidates, *a, **kw):
        found = walk(client_, keys_, candidates, *a, **kw)
        assert found == set()  # nobody named either when the walk read the sets
        q.add([NewItem(_h(9), (_url("again"),))])
        other = TrackerHealth(client, keys, refresh=0, flush=0)
        other.record(_url("again"), FAILURE)  # written at once: used after the cutoff
        return found

    monkeypatch.setattr(health_module.tracker_names, "named", walk_then_a_worker_announces)
    assert h.prune() == 1
    assert set(tracker_report(client, keys, 20)) == {_url("again")}


def test_one_walk_per_interval_for_the_whole_namespace(client, keys):
    first = TrackerHealth(client, keys, refresh=0, prune_after=PERIOD)
    second = TrackerHealth(client, keys, refresh=0, prune_after=PERIOD)
    first.record(_url("a"), ANSWER)
    first.flush()
    later = time.time() + PERIOD + 1
    first.record(_url("b"), ANSWER)  # b becomes a candidate only after the first walk
    first.flush()
    client.zadd(keys.tracker_used, {_url("b"): later - PERIOD + 5})
    assert first.prune(now=later) == 1  # a: nobody names it
    # b is a candidate a little later, but a walk began less than walk_every ago: nothing read
    assert second.prune(now=later + 10) == 0 and _url("b") in tracker_report(client, keys, 20)
    assert second.prune(now=later + health_module.PRUNE_EVERY) == 1
    assert tracker_report(client, keys, 20) == {}


def test_prune_script_refuses_bad_arguments_before_any_write(client, keys):
    import redis

    h = TrackerHealth(client, keys)
    h.record(_url("x"), FAILURE)
    k = [keys.tracker_health, keys.tracker_used, keys.tracker_rank, keys.tracker_totals]
    for args in (["nan", 1, 0, _url("x")], [0, 1, 5, _url("x")], [0, 1, -1, _url("x")], [0, 1, "x"]):
        with pytest.raises(redis.ResponseError, match="tracker_prune"):
            h._prune(keys=k, args=args)
    assert client.hlen(keys.tracker_health) == 1


def test_prune_runs_on_a_redis_cluster_with_shards_on_every_master(cluster_ns, settings):
    """Each script's keys are one slot's: the walk asks every shard's master, the prune the home's."""
    from crawler.store import connect as store

    ns, url = cluster_ns
    s = settings.replace(redis_url=url, namespace=ns, evict_below=0.9)
    client = store.connect(s)
    try:
        keys = Keys(ns, 6)
        q = Queue(client, keys, s)
        hs = [_h(100 + i) for i in range(12)]
        q.add([NewItem(x, (_url(f"c{i}"),)) for i, x in enumerate(hs)])
        leases = _claim_all(q, len(hs), time.time())
        for x in hs[::2]:
            _evict(q, leases[x], time.time())
        h = TrackerHealth(client, keys, refresh=0, flush=3600, prune_after=PERIOD)
        for i in range(len(hs)):
            h.record(_url(f"c{i}"), ANSWER, returned=1)
        h.flush()
        assert h.prune(now=time.time() + PERIOD + 1) == len(hs) // 2
        assert set(tracker_report(client, keys, 20)) == {_url(f"c{i}") for i in range(1, len(hs), 2)}
    finally:
        client.close()
