"""BEP 15 scrape on the shared UDP client: several torrents in one packet, on the cached connection id."""

from __future__ import annotations

import os
import socket
import time

import pytest

from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.udp_client import UdpTrackerClient
from tests.hostile import UDP_GOOD, UDP_TRUNCATED, HostileUdpTracker
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)


@pytest.fixture
def udp():
    c = UdpTrackerClient(timeout=1.0, retries=2)
    yield c
    c.close()


def test_scrape_counts_of_several_torrents_in_one_packet(opentracker, udp):  # noqa: F811
    a, b, c, empty = (os.urandom(20).hex() for _ in range(4))
    ot = opentracker([a, b, c, empty])
    n = 0

    def peer(ih, left, event=u.EVENT_STARTED):
        nonlocal n
        ot.announce_from(peer_address(n), ih, 28000 + n, left=left, event=event)
        n += 1

    peer(a, 0)
    peer(a, 0)
    peer(a, 10)  # a: 2 seeders, 1 leecher
    for _ in range(3):
        peer(b, 10)  # b: 0 seeders, 3 leechers
    ot.announce_from("127.4.0.1", c, 28100, left=10)
    ot.announce_from("127.4.0.1", c, 28100, left=0, event=u.EVENT_COMPLETED)  # c: 1 seeder, 1 completed

    addr = ("127.0.0.1", ot.port)
    deadline = time.monotonic() + 5
    hashes = [bytes.fromhex(h) for h in (a, b, c, empty)]
    entries = udp.scrape(addr, socket.AF_INET, hashes, deadline)
    got = [(e.seeders, e.leechers, e.completed) for e in entries]
    assert got == [(2, 1, 0), (0, 3, 0), (1, 0, 1), (0, 0, 0)]
    assert (udp.connects_sent, udp.scrapes_sent) == (1, 1)
    # The order is the request's, and the connection id is reused.
    again = udp.scrape(addr, socket.AF_INET, hashes[::-1], deadline)
    assert [(e.seeders, e.leechers, e.completed) for e in again] == got[::-1]
    assert (udp.connects_sent, udp.scrapes_sent) == (1, 2)
    # An announce and a scrape share the connection id.
    (withdrawn,) = udp.announce_many(addr, socket.AF_INET, hashes[:1], os.urandom(20), 1, 10, deadline,
                                     event=u.EVENT_STOPPED)
    assert isinstance(withdrawn, u.AnnounceReply), withdrawn
    assert (udp.connects_sent, udp.announces_sent) == (1, 1)


def test_scrape_reply_that_does_not_match_the_request_is_a_typed_error(udp):
    t = HostileUdpTracker()
    try:
        addr, deadline = ("127.0.0.1", t.port), time.monotonic() + 3
        good = [bytes([UDP_GOOD]) + os.urandom(19) for _ in range(3)]
        assert [e.seeders for e in udp.scrape(addr, socket.AF_INET, good, deadline)] == [1, 2, 3]
        # a reply shorter than asked is what the tracker read (chihaya reads 50 a packet, aquatic 70)
        short = [bytes([UDP_TRUNCATED]) + os.urandom(19), good[0]]
        assert [e.seeders for e in udp.scrape(addr, socket.AF_INET, short, deadline)] == [1]
        with pytest.raises(ValueError, match="1..74"):
            udp.scrape(addr, socket.AF_INET, good * 25, deadline)
        assert t.connects == 1 and udp.scrapes_sent == 2
    finally:
        t.close()
