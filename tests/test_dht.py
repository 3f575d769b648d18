"""End-to-end tests of the DHT source against a real libtorrent swarm on loopback.

One swarm of 12 nodes (127.0.0.20-31) is shared by the module; three
info-hashes: A announced by 3 nodes, B by 6 nodes, C by nobody. The crawler's
own node listens on its own loopback address and never announces.
"""

from __future__ import annotations

import itertools
import time

import gevent
import pytest

from crawler.settings import Settings
from crawler.sources.addresses import AddressRefused
from crawler.sources.dht.dht import DhtSource
from tests.dht_swarm import HASH_A as A
from tests.dht_swarm import HASH_B as B
from tests.dht_swarm import HASH_C as C
from tests.dht_swarm import Swarm, dht_swarm  # noqa: F401 (the shared fixture)

pytestmark = pytest.mark.slow

CRAWLER_IP = "127.0.0.2"


@pytest.fixture(scope="module")
def swarm(dht_swarm):  # noqa: F811
    return dht_swarm


def dht_settings(swarm, ip: str, **changes) -> Settings:
    base = {
        "dht_bootstrap": tuple(swarm.endpoints[:3]),
        "dht_listen": ((ip, 0),),
        "allow_private": True,
        "dht_timeout": 8.0,
        "trackers": (),
    }
    base.update(changes)
    return Settings(**base)


@pytest.fixture(scope="module")
def dht(swarm):
    source = DhtSource(dht_settings(swarm, CRAWLER_IP, dht_settle=0.5))
    yield source
    source.close()


def test_lookup_finds_exactly_the_announced_peers(swarm, dht):
    # Read the greenlets we spawned, in spawn order: joinall returns them in
    # the order they finished, so unpacking its result swapped A and B
    # whenever B's lookup settled first.
    ga, gb = gevent.spawn(dht.lookup, A), gevent.spawn(dht.lookup, B)
    gevent.joinall([ga, gb], raise_error=True)
    ra, rb = ga.value, gb.value
    assert ra.ok and rb.ok
    assert ra.peers == swarm.expected[A]
    assert rb.peers == swarm.expected[B]
    assert ra.source == "dht" and ra.max_peers == 100


def test_crawler_is_never_among_the_peers(swarm, dht):
    assert CRAWLER_IP not in swarm.ips and swarm.expected[A] and swarm.expected[B]
    for ih in (A, B, C):
        result = dht.lookup(ih)
        assert result.ok, result.error
        # exactly the announcing nodes, never the crawler's own node (a lookup of A or B that
        # found nobody fails here too)
        assert CRAWLER_IP not in {ip for ip, _ in result.peers}
        assert result.peers == swarm.expected.get(ih, frozenset()), ih


def test_unannounced_hash_answers_with_zero_peers(dht):
    result = dht.lookup(C)
    assert result.ok, result.error
    assert result.peers == frozenset()
    assert not result.full


def test_lookup_stops_at_max_peers(swarm):
    with DhtSource(dht_settings(swarm, "127.0.0.4", dht_max_peers=2, dht_settle=5.0)) as small:
        result = small.lookup(B)
    assert result.ok and result.full
    assert len(result.peers) >= 2
    assert result.peers <= swarm.expected[B]


def test_unreachable_bootstrap_fails_within_deadline(swarm):
    settings = dht_settings(swarm, "127.0.0.5", dht_bootstrap=(("127.0.0.99", 9), ("127.0.0.98", 9)), dht_timeout=2.0)
    with DhtSource(settings.replace(dht_settle=0.5)) as lonely:
        start = time.monotonic()
        result = lonely.lookup(A)
        elapsed = time.monotonic() - start
        assert not lonely.dht_health()["bootstrapped"]
    assert not result.ok
    assert result.peers == frozenset()
    assert "not bootstrapped" in result.error
    assert elapsed < 2.0 + 1.5


def test_dead_routing_table_fails_instead_of_zero_peers():
    # Bootstrap routers never enter libtorrent's routing table: bootstrap from
    # one node so the other three do.
    with Swarm(size=4, first_ip=60) as small:
        settings = Settings(
            dht_bootstrap=tuple(small.endpoints[:1]), dht_listen=(("127.0.0.6", 0),), allow_private=True, dht_timeout=4.0
        )
        source = DhtSource(settings.replace(dht_settle=0.5))
        alive = source.lookup(C)
        assert alive.ok, alive.error
    # The swarm is gone; the crawler's routing table still lists its nodes.
    try:
        dead = source.lookup(C)
    finally:
        source.close()
    assert not dead.ok
    assert "no DHT node responded" in dead.error


def test_hub_keeps_running_during_lookups(swarm, dht):
    ticks = []

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.01)

    t = gevent.spawn(ticker)
    try:
        start = time.monotonic()
        jobs = [gevent.spawn(dht.lookup, ih) for ih in (A, B, C, C)]
        gevent.joinall(jobs, raise_error=True)
        results = [j.value for j in jobs]
        elapsed = time.monotonic() - start
    finally:
        t.kill()
    assert all(r.ok for r in results)
    # The C lookups wait for the traversal to settle (0.5 s): the ticker ran
    # all along instead of being starved by a blocked hub.
    assert elapsed >= 0.5
    assert len(ticks) >= 20
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.25


def test_lookups_in_flight_are_bounded(swarm):
    settings = dht_settings(swarm, "127.0.0.7", dht_lookups_in_flight=2)
    seen = []
    with DhtSource(settings.replace(dht_settle=0.3)) as source:

        def watch():
            while True:
                seen.append(source.dht_health()["lookups_in_flight"])
                gevent.sleep(0.005)

        w = gevent.spawn(watch)
        jobs = [gevent.spawn(source.lookup, ih) for ih in (A, B, C, A, B, C)]
        gevent.joinall(jobs, raise_error=True)
        w.kill()
    assert max(seen) == 2
    assert [j.value.peers for j in jobs] == [swarm.expected[A], swarm.expected[B], frozenset()] * 2


def test_health_reports_routing_table(dht):
    dht.lookup(A)
    # dht_health never waits: it answers the latest counters seen and asks for fresh ones, which
    # arrive with the session's next alerts (later on a loaded machine)
    health, deadline = dht.dht_health(), time.monotonic() + 10
    while health["nodes"] == 0 and time.monotonic() < deadline:
        gevent.sleep(0.1)
        health = dht.dht_health()
    assert health["bootstrapped"] is True
    assert health["nodes"] > 0
    assert health["bootstrap_nodes"] == 3


def test_close_fails_waiting_and_later_lookups(swarm):
    source = DhtSource(dht_settings(swarm, "127.0.0.8", dht_settle=5.0))
    waiting = gevent.spawn(source.lookup, C)  # settles only after 5 s
    gevent.sleep(0.3)
    source.close()
    result = waiting.get(timeout=2)
    assert not result.ok and "closed" in result.error
    after = source.lookup(A)
    assert not after.ok and "closed" in after.error
    source.close()  # twice is fine


def test_bad_info_hash_is_refused(dht):
    with pytest.raises(ValueError):
        dht.lookup("abc")
    with pytest.raises(ValueError):
        dht.lookup("00" * 19)


def test_private_bootstrap_refused_unless_allowed():
    settings = Settings(dht_bootstrap=(("127.0.0.1", 6881),), dht_listen=(("127.0.0.9", 0),), allow_private=False)
    with pytest.raises(AddressRefused, match="PEERCRAWL_ALLOW_PRIVATE"):
        DhtSource(settings)


def test_session_settings_are_crawler_sized(swarm):
    settings = dht_settings(swarm, "127.0.0.10", dht_upload_rate_limit=10_000_000)
    with DhtSource(settings) as source:
        pack = source._session.get_settings()
    assert pack["dht_upload_rate_limit"] == 420_000  # capped below libtorrent 2.1's overflow
    assert pack["recv_socket_buffer_size"] >= 1 << 20
    assert not pack["enable_upnp"] and not pack["enable_natpmp"] and not pack["enable_lsd"]
    assert pack["dht_read_only"]
