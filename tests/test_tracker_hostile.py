"""Hostile UDP and HTTP trackers: typed failures within the deadline, others still served."""

from __future__ import annotations

import os
import time

import gevent
import pytest

from crawler.sources import addresses
from crawler.sources.trackers.trackers import Trackers
from tests import hostile
from tests.hostile import GOOD_PEERS, UDP_CASES, HostileHttpTracker, HostileUdpTracker, http_tracker, udp_tracker  # noqa: F401 (fixtures)


@pytest.fixture
def settings(settings):
    """These tests read the announce exchange itself: no scrape before it (tests/test_tracker_scrape_first.py)."""
    return settings.replace(scrape_first=False)


def _hash(mode: int) -> str:
    return (bytes([mode]) + os.urandom(19)).hex()


@pytest.fixture
def trackers(settings, client, keys):
    # udp: 2 tries of 0.5 s; backoff after many failures so one test's faults do not bench the tracker.
    t = Trackers(settings.replace(udp_timeout=0.5, udp_retries=2, http_timeout=2.0, http_max_bytes=256 * 1024,
                                  tracker_backoff_after=1000), client, keys)
    yield t
    t.close()




def test_hostile_udp_fail_typed_in_time_while_good_torrents_are_served(udp_tracker, trackers):
    deadline_s = 3.0
    # Warm the connection id first: otherwise whichever greenlet reaches the
    # client first makes the connect (its Redis read of tracker health decides
    # the order), and when that is the error case its id is not a cached one,
    # so no second connect follows.
    assert trackers.announce(udp_tracker.url, _hash(hostile.UDP_GOOD)).ok
    bad = [(gevent.spawn(trackers.announce, udp_tracker.url, _hash(m), time.monotonic() + deadline_s), why)
           for m, why in UDP_CASES]
    good = [gevent.spawn(trackers.announce, udp_tracker.url, _hash(hostile.UDP_GOOD)) for _ in range(20)]
    t0 = time.monotonic()
    gevent.joinall([g for g, _ in bad] + good, timeout=10)
    assert time.monotonic() - t0 < deadline_s + 1
    for g, why in bad:
        r = g.value
        assert r is not None and not r.ok, r
        assert why in r.error
    for g in good:
        r = g.value
        assert r.ok and set(r.peers) == set(GOOD_PEERS) and (r.seeders, r.leechers) == (1, 3)
    # Spoofed, stale and wrong-action datagrams were dropped, never believed.
    assert trackers.udp.dropped >= 3
    # One connect for all (the warm-up's), plus one after the error reply (the id may have been forgotten).
    assert udp_tracker.connects == 2


def test_udp_overall_deadline_bounds_retries(udp_tracker, settings, client, keys):
    t = Trackers(settings.replace(udp_timeout=5.0, udp_retries=5), client, keys)
    try:
        t0 = time.monotonic()
        r = t.announce(udp_tracker.url, _hash(hostile.UDP_SILENT), time.monotonic() + 0.6)
        assert time.monotonic() - t0 < 5.0  # the deadline ended it, not the first 5 s timeout
        assert not r.ok and "TrackerTimeout" in r.error
    finally:
        t.close()


HTTP_CASES = [
    ("/failure", "tracker refused: unregistered torrent"),
    ("/odd", "IPv4 compact peer list of 7 bytes is not a multiple of 6"),
    ("/garbage", "not bencoded"),
    ("/huge", "larger than 262144 bytes"),
    ("/endless", "HttpReplyError: chunked body in more than 4096 chunks"),
    ("/endlesswide", "HttpTrackerError: tracker http://127.0.0.1:"),
    ("/endlesswide", "reply larger than 262144 bytes"),
    ("/slow", "TrackerTimeout"),
    ("/drip", "TrackerTimeout"),
    ("/loop", "more than 3 redirects"),
    ("/nothing", "HTTP status 404"),
]


# Less than the shortest stall of the hostile server (/slow, 30 s).
HOSTILE_STALL_S = 15


def test_hostile_http_fail_typed_in_time_while_good_is_served(http_tracker, trackers):
    deadline_s = 2.0
    ih = _hash(0)
    bad = [(gevent.spawn(trackers.announce, http_tracker.base + path, ih, time.monotonic() + deadline_s), why)
           for path, why in HTTP_CASES]
    good = [gevent.spawn(trackers.announce, http_tracker.base + p, ih) for p in ("/good", "/chunked") * 5]
    t0 = time.monotonic()
    gevent.joinall([g for g, _ in bad] + good, timeout=HOSTILE_STALL_S)
    # /slow answers after 30 s and /drip sends its 1,000 bytes over 100 s, a
    # byte every 0.1 s (no read ever times out): a TrackerTimeout from both
    # before either would end shows the deadline ended them. The bound is that
    # fact, with room for a loaded machine, not the deadline plus a guess.
    assert time.monotonic() - t0 < HOSTILE_STALL_S
    for (g, why), (path, _) in zip(bad, HTTP_CASES):
        r = g.value
        assert r is not None and not r.ok, (path, r)
        assert why in r.error, (path, r.error)
    for g in good:
        r = g.value
        assert r.ok, r.error
        assert set(r.peers) == set(GOOD_PEERS) | {("::1", 3333)}
        assert (r.seeders, r.leechers, r.interval, r.min_interval) == (1, 3, 900.0, 60.0)
        assert r.warning == "be nice"


def test_http_dictionary_peers(http_tracker, trackers):
    r = trackers.announce(http_tracker.base + "/dictpeers", _hash(0))
    assert r.ok and set(r.peers) == {("127.9.0.5", 5555)}


def test_redirect_to_private_address_refused(http_tracker, settings, client, keys):
    # 127.0.0.1 plays a public tracker; every other address gets the real policy (private off).
    def public_127_0_0_1(ip, what):
        if ip != "127.0.0.1":
            addresses.check(ip, False, what)

    t = Trackers(settings.replace(allow_private=False), client, keys, address_check=public_127_0_0_1)
    try:
        target = f"http://127.0.0.2:{http_tracker.port}/good"
        r = t.announce(f"{http_tracker.base}/redirect?to={target}", _hash(0))
        assert not r.ok and "127.0.0.2, a loopback address" in r.error
        ok = t.announce(f"{http_tracker.base}/redirect?to={http_tracker.base}/good", _hash(0))
        assert ok.ok and set(ok.peers) >= set(GOOD_PEERS)
    finally:
        t.close()


@pytest.mark.parametrize("url", ["udp://127.0.0.1:6969/announce", "http://127.0.0.1:6969/announce",
                                 "http://[::1]:80/announce", "udp://10.1.2.3:80"])
def test_private_trackers_refused_without_traffic(settings, client, keys, url):
    t = Trackers(settings.replace(allow_private=False), client, keys)
    try:
        r = t.announce(url, _hash(0))
    finally:
        t.close()
    assert not r.ok and "PEERCRAWL_ALLOW_PRIVATE=1" in r.error
    assert t.udp.connects_sent == 0
