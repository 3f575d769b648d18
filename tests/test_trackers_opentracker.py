"""End to end against a real opentracker on loopback: UDP and HTTP, self-exclusion."""

from __future__ import annotations

import os

import gevent
import pytest

from crawler.counters.ip_forms import PackedIPs, packed_ips
from crawler.sources.result import SourceResult, VisitResult
from crawler.sources.trackers.trackers import Trackers
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)


def _hashes(n):
    return [os.urandom(20).hex() for _ in range(n)]


@pytest.fixture
def trackers(settings, client, keys):
    t = Trackers(settings.replace(udp_timeout=1.0), client, keys)
    yield t
    t.close()


@pytest.mark.parametrize("scheme", ["udp", "http"])
def test_exactly_the_announced_peers_with_counts(opentracker, trackers, scheme):  # noqa: F811 (fixture)
    ih, other = _hashes(2)
    ot = opentracker([ih, other])
    expected = set()
    for i in range(7):
        ip, port = peer_address(i), 20000 + i
        ot.announce_from(ip, ih, port, left=0 if i < 3 else 100)  # 3 seeders, 4 leechers
        expected.add((ip, port))
    ot.announce_from(peer_address(99), other, 7000)  # another torrent's peer stays out
    url = ot.udp_url if scheme == "udp" else ot.http_url
    r = trackers.announce(url, ih)
    assert r.ok, r.error
    assert set(r.peers) == expected
    assert (r.seeders, r.leechers) == (3, 4)
    assert r.max_peers == 200 and r.interval and r.interval > 0
    assert not r.full
    # the visit's IPs as the recorder takes them: a UDP tracker's packed, no text made; HTTP's texts
    ips = VisitResult(ih, (r,)).distinct_ips
    assert isinstance(ips, PackedIPs) == (scheme == "udp")
    assert packed_ips(ips) == packed_ips([ip for ip, _ in expected])
    both = VisitResult(ih, (r, SourceResult("dht", True, frozenset({("127.9.9.9", 1)})))).distinct_ips
    assert not isinstance(both, PackedIPs) and both == {ip for ip, _ in expected} | {"127.9.9.9"}


@pytest.mark.parametrize("scheme", ["udp", "http"])
def test_dead_torrent_reads_zero_and_crawler_is_not_left_listed(opentracker, trackers, scheme):  # noqa: F811 (fixture)
    (ih,) = _hashes(1)
    ot = opentracker([ih])
    url = ot.udp_url if scheme == "udp" else ot.http_url
    for _ in range(3):  # again and again: the crawler never keeps it alive
        r = trackers.announce(url, ih)
        assert r.ok, r.error
        assert r.peers == frozenset()
        assert (r.seeders, r.leechers) == (0, 0)
    # An independent client from another source address sees only itself.
    seen = ot.announce_from("127.3.3.3", ih, 5999)
    assert set(seen.peers) == {("127.3.3.3", 5999)}
    assert (seen.seeders, seen.leechers) == (0, 1)


def test_a_killed_workers_entry_is_not_counted_by_the_others(opentracker, settings, client, keys):  # noqa: F811 (fixture)
    """A worker SIGKILLed between its announce and its withdrawal leaves its entry
    in the tracker. Every worker of the namespace announces on one shared port,
    so the others drop that entry as the crawler's own instead of counting a peer."""
    (ih,) = _hashes(1)
    ot = opentracker([ih])
    ot.announce_from(peer_address(1), ih, 20001)
    a = Trackers(settings.replace(udp_timeout=1.0), client, keys)
    b = Trackers(settings.replace(udp_timeout=1.0), client, keys)
    try:
        assert a.port == b.port and a.announcer.peer_id != b.announcer.peer_id
        # dead workers' leftovers, started and never stopped: one from this machine's
        # address, one from another crawler machine's
        ot.announce_from("127.0.0.1", ih, a.port, left=1)
        ot.announce_from("127.0.0.9", ih, a.port, left=1)
        for _ in range(2):
            r = b.announce(ot.udp_url, ih)
            assert r.ok, r.error
            assert set(r.peers) == {(peer_address(1), 20001)}
    finally:
        a.close()
        b.close()


def test_many_torrents_concurrently_reuse_one_connection_id(opentracker, trackers):  # noqa: F811 (fixture)
    hashes = _hashes(40)
    ot = opentracker(hashes)
    for n, ih in enumerate(hashes):
        ot.announce_from(peer_address(n), ih, 30000 + n)
    jobs = [gevent.spawn(trackers.announce, ot.udp_url, ih) for ih in hashes]
    gevent.joinall(jobs, timeout=20)
    results = [j.value for j in jobs]
    assert all(r is not None and r.ok for r in results)
    for n, r in enumerate(results):
        assert set(r.peers) == {(peer_address(n), 30000 + n)}
    assert trackers.udp.connects_sent == 1
    assert trackers.udp.announces_sent == 80  # announce + stopped per torrent


def test_numwant_is_the_trackers_max(opentracker, settings, client, keys):  # noqa: F811 (fixture)
    from crawler.source_settings import TrackerSpec

    (ih,) = _hashes(1)
    ot = opentracker([ih])
    for i in range(12):
        ot.announce_from(peer_address(i), ih, 21000 + i)
    s = settings.replace(trackers=(TrackerSpec(ot.udp_url, 5),))
    t = Trackers(s, client, keys)
    try:
        r = t.announce(ot.udp_url, ih)
    finally:
        t.close()
    assert r.ok and r.max_peers == 5
    # We ask for max + 1 = 6: if we are one of the 6 opentracker picked, 5 real peers are left.
    assert r.returned == 6 and len(r.peers) in (5, 6)
    assert r.leechers == 12
