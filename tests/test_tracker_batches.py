"""Announcing many torrents together (``Trackers.announce_many``): the same answers as one by one,
against a real opentracker and hostile or lossy trackers on loopback."""

from __future__ import annotations

import os
import time

import gevent
import pytest

from crawler.sources.trackers.trackers import Trackers
from tests import hostile
from tests.hostile import GOOD_PEERS, udp_tracker  # noqa: F401 (fixture)
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)


def _hashes(n, first: int | None = None):
    return [((bytes([first]) if first is not None else b"") + os.urandom(20 if first is None else 19)).hex()
            for _ in range(n)]


@pytest.fixture
def trackers(settings, client, keys):
    t = Trackers(settings.replace(udp_timeout=0.5, udp_retries=2, tracker_backoff_after=1000), client, keys)
    yield t
    t.close()


def test_a_batch_gets_each_torrents_own_peers_and_counts(opentracker, trackers):  # noqa: F811 (fixture)
    hashes = _hashes(40)
    ot = opentracker(hashes)
    expected = {}
    for n, ih in enumerate(hashes):
        peers = set()
        for i in range(n % 7):
            ip, port = peer_address(10 * n + i), 20000 + i
            ot.announce_from(ip, ih, port, left=0 if i < 2 else 100)
            peers.add((ip, port))
        expected[ih] = peers
    results = trackers.announce_many(ot.udp_url, hashes)
    assert [r.source for r in results] == [ot.udp_url] * len(hashes)
    for ih, r in zip(hashes, results):
        assert r.ok, r.error
        assert set(r.peers) == expected[ih]
        k = len(expected[ih])
        assert (r.seeders, r.leechers) == (min(k, 2), max(0, k - 2))
    # one by one gives the same
    one = trackers.announce(ot.udp_url, hashes[6])
    assert one.peers == results[6].peers and (one.seeders, one.leechers) == (results[6].seeders, results[6].leechers)
    # the batch withdrew itself: a later client sees only the announced peers
    assert set(ot.announce_from("127.3.3.3", hashes[6], 5999).peers) == expected[hashes[6]] | {("127.3.3.3", 5999)}


def test_hostile_answers_fail_their_own_torrent_only_within_the_deadline(udp_tracker, trackers):  # noqa: F811
    assert trackers.announce(udp_tracker.url, _hashes(1, hostile.UDP_GOOD)[0]).ok  # a cached connection id
    connects = udp_tracker.connects
    hashes, wanted = [], []
    for mode, why in hostile.UDP_CASES:
        hashes += _hashes(1, mode) + _hashes(3, hostile.UDP_GOOD)
        wanted += [why, None, None, None]
    t0 = time.monotonic()
    results = trackers.announce_many(udp_tracker.url, hashes, time.monotonic() + 3.0)
    assert time.monotonic() - t0 < 3.0 + 0.5
    for r, why in zip(results, wanted):
        if why is None:
            assert r.ok and set(r.peers) == set(GOOD_PEERS) and (r.seeders, r.leechers) == (1, 3), r
        else:
            assert not r.ok and why in r.error, (why, r.error)
    # the error reply on a cached id: one fresh connect, and that torrent asked once more
    assert udp_tracker.connects == connects + 1


def test_lost_datagrams_are_sent_again_and_a_batch_past_its_tries_times_out(settings, client, keys):
    lossy = hostile.LossyTracker()
    try:
        t = Trackers(settings.replace(udp_timeout=0.3, udp_retries=2, tracker_backoff_after=1000), client, keys)
        hashes = _hashes(30)
        results = t.announce_many(lossy.url, hashes)
        assert all(r.ok and set(r.peers) == set(GOOD_PEERS) for r in results), [r.error for r in results]
        # each announce tried twice; each withdrawal once (best effort: one try's time, as one by one)
        assert lossy.announces == 3 * len(hashes)
        t.close()
        once = Trackers(settings.replace(udp_timeout=0.3, udp_retries=1, tracker_backoff_after=1000), client, keys)
        results = once.announce_many(lossy.url, _hashes(5))
        assert all(not r.ok and "after 1 tries" in r.error for r in results), [r.error for r in results]
        once.close()
    finally:
        lossy.close()


def test_a_batch_of_one_or_none_and_other_schemes(opentracker, trackers):  # noqa: F811 (fixture)
    hashes = _hashes(3)
    ot = opentracker(hashes)
    ot.announce_from(peer_address(1), hashes[0], 7000)
    assert trackers.announce_many(ot.udp_url, []) == []
    (r,) = trackers.announce_many(ot.udp_url, hashes[:1])
    assert r.ok and set(r.peers) == {(peer_address(1), 7000)}
    http = trackers.announce_many(ot.http_url, hashes)
    assert [r.ok for r in http] == [True] * 3 and set(http[0].peers) == {(peer_address(1), 7000)}
    for url in ("udp://no-port.invalid/announce", "udp://[::1/announce"):
        bad = trackers.announce_many(url, hashes)
        assert all(not r.ok and "lacks a host or port" in r.error for r in bad), url
        assert "lacks a host or port" in trackers.announce(url, hashes[0]).error


def test_announces_of_many_greenlets_share_batches_and_each_gets_its_own_answer(opentracker, trackers):  # noqa: F811
    hashes, warm = _hashes(40), _hashes(1)[0]
    ot = opentracker([*hashes, warm])
    expected = {}
    for n, ih in enumerate(hashes):
        expected[ih] = {(peer_address(10 * n + i), 21000 + i) for i in range(n % 5)}
        for ip, port in expected[ih]:
            ot.announce_from(ip, ih, port)
    assert trackers.announce(ot.udp_url, warm).ok  # the tracker's health read and cached
    before = trackers.batches
    jobs = [gevent.spawn(trackers.announce, ot.udp_url, ih) for ih in hashes]
    gevent.joinall(jobs, raise_error=True)
    for ih, j in zip(hashes, jobs):
        assert j.value.ok and set(j.value.peers) == expected[ih], j.value.error
        assert j.value.leechers == len(expected[ih])  # the withdrawal's counts: the swarm without us
    assert trackers.batches == before + 1  # asked in one turn of the loop: one batch
    before = trackers.batches
    # greenlets asking at different times make batches of their own; each still gets its answer
    staggered = [gevent.spawn_later(0.01 * (i % 4), trackers.announce, ot.udp_url, ih) for i, ih in enumerate(hashes)]
    gevent.joinall(staggered, raise_error=True)
    assert [set(j.value.peers) for j in staggered] == [expected[ih] for ih in hashes]
    assert before + 2 <= trackers.batches <= before + len(hashes) // 2
    # every announce withdrew: a later client sees only the announced peers
    assert set(ot.announce_from("127.3.3.3", hashes[3], 5999).peers) == expected[hashes[3]] | {("127.3.3.3", 5999)}


def test_each_torrent_of_a_batch_is_answered_without_waiting_for_its_slowest(udp_tracker, settings, client, keys):  # noqa: F811
    t = Trackers(settings.replace(udp_timeout=2.0, udp_retries=1, tracker_backoff_after=1000), client, keys)
    try:
        silent = _hashes(1, hostile.UDP_SILENT)[0]
        good = _hashes(8, hostile.UDP_GOOD)
        assert t.announce(udp_tracker.url, good[0]).ok  # the tracker's health read and cached
        answered_at = {}

        def ask(ih):
            r = t.announce(udp_tracker.url, ih, time.monotonic() + 3.0)
            answered_at[ih] = time.monotonic()
            return r

        t0 = time.monotonic()
        jobs = [gevent.spawn(ask, ih) for ih in [silent, *good]]
        gevent.joinall(jobs, raise_error=True)
        assert t.batches == 2
        assert not jobs[0].value.ok and "no announce reply" in jobs[0].value.error
        assert all(j.value.ok for j in jobs[1:])
        # the silent torrent waited its 2 s try; the others were handed on as soon as they answered
        assert answered_at[silent] - t0 >= 2.0
        assert max(answered_at[ih] for ih in good) - t0 < 1.0
    finally:
        t.close()
