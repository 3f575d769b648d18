"""A tracker name with several addresses: the next is tried when one fails, each under the address policy.

Names are resolved by an injected resolver (``tests.tls_trackers.resolver_for``):
"multi.test" resolves to a dead loopback address first and to opentracker's
127.0.0.1 second, as a round-robin DNS name with one dead server would.
"""

from __future__ import annotations

import os
import socket as _stdsocket
import time

import pytest
from gevent import socket

from crawler.sources import addresses
from crawler.sources.trackers.trackers import Trackers
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.tls_trackers import resolver_for


@pytest.fixture
def settings(settings):
    """These tests read the announce exchange itself: no scrape before it (tests/test_tracker_scrape_first.py)."""
    return settings.replace(scrape_first=False)

DEAD = "127.0.0.5"  # nothing of opentracker's listens here (it binds 127.0.0.1 only)


def _hash() -> str:
    return os.urandom(20).hex()


class SilentUdp:
    """A UDP socket on DEAD:port that counts datagrams and never answers (a dead tracker)."""

    def __init__(self, port: int):
        self.sock = socket.socket(_stdsocket.AF_INET, _stdsocket.SOCK_DGRAM)
        self.sock.bind((DEAD, port))
        self.sock.setblocking(False)

    def received(self) -> int:
        n = 0
        while True:
            try:
                self.sock.recv(2048)
            except BlockingIOError:
                return n
            n += 1

    def close(self):
        self.sock.close()


@pytest.fixture
def swarm(opentracker):  # noqa: F811
    ih = _hash()
    ot = opentracker([ih])
    expected = set()
    for i in range(4):
        ot.announce_from(peer_address(i), ih, 27000 + i, left=0 if i == 0 else 10)
        expected.add((peer_address(i), 27000 + i))
    return ot, ih, expected


@pytest.fixture
def make_trackers(settings, client, keys):
    made = []

    def make(names, **kw) -> Trackers:
        s = settings.replace(udp_timeout=0.4, udp_retries=2, http_timeout=5.0, tracker_backoff_after=1000)
        t = Trackers(s, client, keys, resolver=resolver_for(names), **kw)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def test_udp_moves_on_from_a_silent_address_and_remembers_the_one_that_answered(swarm, make_trackers):
    ot, ih, expected = swarm
    dead = SilentUdp(ot.port)
    try:
        t = make_trackers({"multi.test": [DEAD, "127.0.0.1"]})
        url = f"udp://multi.test:{ot.port}/announce"
        t0 = time.monotonic()
        r = t.announce(url, ih, t0 + 5)
        assert r.ok, r.error
        assert set(r.peers) == expected and (r.seeders, r.leechers) == (1, 3)
        assert dead.received() == 2  # the connect, tried udp_retries times
        # Waited out its tries, then moved on before its share of the deadline (2.5 s) ran out.
        assert 0.8 <= time.monotonic() - t0 < 2.5
        # The address that answered goes first now: the dead one is not asked again.
        again = t.announce(url, ih, time.monotonic() + 5)
        assert again.ok and set(again.peers) == expected
        assert dead.received() == 0
    finally:
        dead.close()


def test_udp_every_address_silent_fails_within_the_deadline(swarm, settings, client, keys):
    ot, ih, _ = swarm
    dead = SilentUdp(ot.port)
    t = Trackers(settings.replace(udp_timeout=5.0, udp_retries=3), client, keys,
                 resolver=resolver_for({"multi.test": [DEAD, "127.0.0.6"]}))
    try:
        t0 = time.monotonic()
        r = t.announce(f"udp://multi.test:{ot.port}/announce", ih, t0 + 1.2)
        elapsed = time.monotonic() - t0
        assert not r.ok and r.error.startswith("TrackerTimeout: none of its 2 addresses answered: ")
        assert f"{DEAD}:{ot.port}" in r.error and f"127.0.0.6:{ot.port}" in r.error
        # Each address had half the deadline: the first could not eat the second's time.
        assert dead.received() == 1
        # The deadline ended it, not the 5 s reply timeout.
        assert 1.1 < elapsed < 5.0
    finally:
        dead.close()
        t.close()


def test_http_moves_on_from_an_address_that_refuses_connections(swarm, make_trackers):
    ot, ih, expected = swarm
    t = make_trackers({"multi.test": [DEAD, "127.0.0.1"]})
    r = t.announce(f"http://multi.test:{ot.port}/announce", ih)
    assert r.ok, r.error
    assert set(r.peers) == expected and (r.seeders, r.leechers) == (1, 3)
    # The address that accepted goes first next time.
    assert t.addresses.good[("tcp", "multi.test", ot.port)] == (_stdsocket.AF_INET, ("127.0.0.1", ot.port))
    assert t.announce(f"http://multi.test:{ot.port}/announce", ih).ok
    r = make_trackers({"multi.test": [DEAD, "127.0.0.6"]}).announce(f"http://multi.test:{ot.port}/announce", ih)
    assert not r.ok and "none of its 2 addresses accepted a connection" in r.error
    assert f"{DEAD} port {ot.port}" in r.error


@pytest.mark.parametrize("scheme", ["udp", "http"])
def test_the_address_policy_applies_to_every_address(swarm, make_trackers, scheme):
    ot, ih, _ = swarm

    def public_127_0_0_1(ip, what):  # 127.0.0.1 plays a public address; the rest get the real policy
        if ip != "127.0.0.1":
            addresses.check(ip, False, what)

    # The first address is allowed and would answer; the second is loopback: the name is refused.
    t = make_trackers({"multi.test": ["127.0.0.1", "127.0.0.2"]}, address_check=public_127_0_0_1)
    r = t.announce(f"{scheme}://multi.test:{ot.port}/announce", ih)
    assert not r.ok and "multi.test" in r.error and "127.0.0.2, a loopback address" in r.error
    assert t.udp.connects_sent == 0
    ok = make_trackers({"multi.test": ["127.0.0.1"]}, address_check=public_127_0_0_1)
    assert ok.announce(f"{scheme}://multi.test:{ot.port}/announce", ih).ok


def test_an_unknown_name_is_a_typed_failure(make_trackers):
    r = make_trackers({}).announce("udp://nowhere.test:6969/announce", _hash())
    assert not r.ok and r.error.startswith("HostUnresolved: tracker udp://nowhere.test:6969: cannot resolve")
