"""Hostile bytes from a real HTTP tracker end as typed failures of that tracker, never as exceptions."""

from __future__ import annotations

import os
import time

import gevent
import pytest

from crawler.sources.trackers import http_codec as h
from crawler.sources.trackers.trackers import Trackers
from tests import hostile
from tests.hostile import (
    GOOD_PEERS,
    http_tracker,  # noqa: F401 (fixtures)
)
from tests.tls_trackers import resolver_for


@pytest.fixture
def trackers(settings, client, keys):
    # udp_timeout bounds the "stopped" announce.
    t = Trackers(settings.replace(http_timeout=2.0, udp_timeout=0.5, tracker_backoff_after=1000), client, keys)
    yield t
    t.close()


@pytest.mark.parametrize("path, why", [
    ("/superscript", "HttpReplyError: bad Content-Length '²'"),
    ("/hexchunk", "HttpReplyError: bad chunked body: illegal chunk header: b'0x"),
    ("/twolengths", "HttpReplyError: conflicting Content-Length headers '5, 6'"),
    ("/bigint", "integer at offset"),
    ("/bigcount", "'complete' of 13 digits is past any swarm's size"),
])
def test_hostile_numbers_are_typed_failures(http_tracker, trackers, path, why):
    r = trackers.announce(http_tracker.base + path, os.urandom(20).hex())
    assert not r.ok and why in r.error, r.error


def test_a_body_delimited_by_the_close_is_read_whole(http_tracker, trackers):
    r = trackers.announce(http_tracker.base + "/untilclose", os.urandom(20).hex())
    assert r.ok, r.error
    assert set(r.peers) >= set(GOOD_PEERS) and r.warning == "be nice"


def test_an_interval_past_any_float_use_is_clamped(http_tracker, trackers):
    r = trackers.announce(http_tracker.base + "/farinterval", os.urandom(20).hex())
    assert r.ok, r.error
    assert set(r.peers) >= set(GOOD_PEERS)
    assert r.interval == r.min_interval == float(h.MAX_INTERVAL)


@pytest.mark.parametrize("location, why", [
    ("http://[::1/announce", "HttpReplyError: bad Location 'http://[::1/announce': Invalid IPv6 URL"),
    ("http://127.0.0.1:%C2%B2/good", "bad port"),
])
def test_a_hostile_redirect_location_is_a_typed_failure(http_tracker, trackers, location, why):
    r = trackers.announce(f"{http_tracker.base}/redirect?to={location}", os.urandom(20).hex())
    assert not r.ok and why in r.error, r.error


def test_a_tracker_url_with_a_non_ascii_name_and_query_is_sent_encoded(http_tracker, settings, client, keys):
    # URLs from magnets and .torrent files may hold any character; the request must still be ASCII.
    t = Trackers(settings.replace(http_timeout=2.0, udp_timeout=0.5), client, keys,
                 resolver=resolver_for({"трекер.test": ["127.0.0.1"]}))
    try:
        r = t.announce(f"http://трекер.test:{http_tracker.port}/good?passkey=ключ ü", os.urandom(20).hex())
    finally:
        t.close()
    assert r.ok, r.error
    assert set(r.peers) >= set(GOOD_PEERS)
    assert http_tracker.last_host == f"xn--e1aaowdh.test:{http_tracker.port}"
    assert "passkey=%D0%BA%D0%BB%D1%8E%D1%87%20%C3%BC&" in http_tracker.last_target


def _longest_stall(f):
    """``f()``'s result and the longest time (CPU time of this thread) the hub went without running a
    1 ms ticker meanwhile: how long the other greenlets of a worker would have waited."""
    stalls = [0.0]

    def tick():
        last = time.thread_time()
        while True:
            gevent.sleep(0.001)
            now = time.thread_time()
            stalls[0], last = max(stalls[0], now - last), now

    ticker = gevent.spawn(tick)
    try:
        return f(), stalls[0]
    finally:
        ticker.kill()


_EMPTY_DICTS = b"d5:peersl" + b"de" * ((2 * 1024 * 1024 - 11) // 2) + b"ee"  # 1,048,570 of them in 2 MiB


def test_a_2_mib_reply_of_empty_dictionaries_fails_without_stalling_the_worker(http_tracker, trackers, monkeypatch):
    monkeypatch.setitem(hostile.HTTP_ROUTES, "/emptydicts", lambda r, p: r.send(_EMPTY_DICTS))
    r, stall = _longest_stall(lambda: trackers.announce(http_tracker.base + "/emptydicts", os.urandom(20).hex()))
    assert not r.ok and "HttpReplyError: reply too large to decode: more than 100,000 values" in r.error, r.error
    assert stall < 0.25, stall  # ~0.05 s; decoding it whole held every greenlet for 0.5-1 s
