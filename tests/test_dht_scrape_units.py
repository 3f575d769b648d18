"""The pure parts of DHT scrapes: the send pacer, and the lookup's state driven by a simulated DHT."""

from __future__ import annotations

import hashlib
import socket
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.sources.addresses import AddressRefused, policy
from crawler.sources.dht import dht_bloom
from crawler.sources.dht import krpc_codec as kc
from crawler.sources.dht.dht_scrape import ScrapeLookup
from crawler.sources.dht.krpc_socket import SendPacer

ALLOW = policy(True)
TARGET = hashlib.sha1(b"units").digest()


@hsettings(max_examples=200, deadline=timedelta(seconds=2))
@given(st.floats(0.5, 20), st.floats(5, 500),
       st.lists(st.tuples(st.integers(0, 6), st.floats(0, 0.4), st.floats(0, 3)), max_size=200))
def test_pacer_spaces_every_ip_and_all_messages(node_rate, overall_rate, events):
    pacer = SendPacer(node_rate, overall_rate)
    now, taken, per_ip = 0.0, [], {}
    for ip, step, patience in events:
        now += step
        address = f"10.0.0.{ip}"
        at = pacer.reserve(address, now, now + patience)
        if at is None:
            assert pacer.slot(address, now) > now + patience
            continue
        assert now <= at <= now + patience
        taken.append(at)
        per_ip.setdefault(address, []).append(at)
        # places are taken at most 3 s (the largest patience) ahead, each 1 / overall_rate after the
        # last: the IPs whose next place is still ahead of now are bounded by that span
        assert pacer.remembered() <= (1 / node_rate + 3) * overall_rate + 2
    eps = 1e-9
    assert all(b - a >= 1 / overall_rate - eps for a, b in zip(taken, taken[1:]))
    assert all(b - a >= 1 / node_rate - eps for ts in per_ip.values() for a, b in zip(ts, ts[1:]))


@pytest.mark.parametrize("rates", [(0, 1), (1, 0), (float("inf"), 1), (1, float("nan")), (-1, 1)])
def test_pacer_refuses_bad_rates(rates):
    with pytest.raises(ValueError):
        SendPacer(*rates)


class World:
    """A simulated DHT of ``size`` nodes, each in a /24 of its own (10.x.y.1): each answers with its 8 closest.

    ``store``: node index -> (seeds, leechers) IPs it keeps for TARGET.
    """

    def __init__(self, size: int, store: dict[int, tuple[list, list]]):
        self.ids = [hashlib.sha1(b"node %d" % i).digest() for i in range(size)]
        self.ips = [f"10.{1 + i // 250}.{i % 250}.1" for i in range(size)]
        self.store = store
        self.asked: list[int] = []

    def distance(self, i: int) -> int:
        return int.from_bytes(self.ids[i], "big") ^ int.from_bytes(TARGET, "big")

    def reply(self, ip: str) -> kc.Response:
        i = self.ips.index(ip)
        self.asked.append(i)
        near = sorted((j for j in range(len(self.ids)) if j != i), key=self.distance)[:8]
        nodes = tuple(kc.Node(self.ids[j], self.ips[j], 6881) for j in near)
        seeds, leechers = self.store.get(i, (None, None))
        return kc.Response(b"t", self.ids[i], nodes,
                           seeds_filter=None if seeds is None else dht_bloom.of_ips(seeds),
                           peers_filter=None if leechers is None else dht_bloom.of_ips(leechers))


def run(lookup: ScrapeLookup, world: World, alpha: int = 3, silent: frozenset = frozenset()):
    """Drive ``lookup`` as ``scrape`` does, answering from ``world`` in the order asked."""
    flight: list[str] = []
    while True:
        while lookup.in_flight < alpha and (address := lookup.next()) is not None:
            lookup.sent()
            flight.append(address[0])
        if not flight:
            return lookup.result()
        ip = flight.pop(0)
        lookup.settle(None if ip in silent else world.reply(ip), ip)


def test_lookup_converges_on_the_closest_and_unions_their_filters():
    world = World(60, {})
    order = sorted(range(60), key=world.distance)
    # the 10 closest store peers; the union must take the 8 closest of them
    for rank, i in enumerate(order[:10]):
        world.store[i] = ([f"192.0.2.{rank}"], [f"198.51.100.{rank}", "203.0.113.1"])
    lookup = ScrapeLookup(TARGET, socket.AF_INET, ALLOW)
    lookup.add(world.ips[order[-1]], 6881)  # the farthest node as the only contact
    r = run(lookup, world)
    assert set(order[:8]) <= set(world.asked) and r.filters == 8
    assert r.seeds_filter == dht_bloom.of_ips(f"192.0.2.{k}" for k in range(8))
    assert r.peers_filter == dht_bloom.of_ips([f"198.51.100.{k}" for k in range(8)] + ["203.0.113.1"])
    assert r.peers == pytest.approx(9, abs=0.6) and r.answered == r.queries == len(world.asked) < 30


def test_lookup_stops_at_max_queries_and_counts_silence():
    world = World(60, {})
    lookup = ScrapeLookup(TARGET, socket.AF_INET, ALLOW, max_queries=5)
    for ip in world.ips[:3]:
        lookup.add(ip, 6881)
    r = run(lookup, world, silent=frozenset(world.ips[:2]))
    assert r.queries == 5 and r.timeouts == 2 and r.answered == 3 and not r.filters


def test_lookup_refuses_by_policy_and_takes_one_node_per_prefix():
    def check(ip: str, what: str) -> None:
        if ip.startswith("10.1.0."):
            raise AddressRefused(what)

    lookup = ScrapeLookup(TARGET, socket.AF_INET, check)
    lookup.add("10.1.0.1", 1)
    lookup.add("10.2.0.1", 1)
    lookup.add("10.2.0.1", 2)  # another port of the same IP
    lookup.add("10.2.0.2", 0)
    lookup.add("10.2.0.3", 1, TARGET)  # another IP of the same /24, however near
    lookup.add("10.1.0.9", 1)  # the /24 of a refused address is still free
    assert lookup.refused == 2 and lookup.shared == 1
    assert lookup.next() == ("10.2.0.1", 1) and lookup.next() is None
    six = ScrapeLookup(TARGET, socket.AF_INET6, ALLOW)
    for ip in ("2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:db8:1:3::1"):
        six.add(ip, 1)
    assert six.shared == 1 and [six.next(), six.next(), six.next()] == [("2001:db8:1:2::1", 1),
                                                                         ("2001:db8:1:3::1", 1), None]


def test_implausible_filters_and_errors_are_left_out():
    lookup = ScrapeLookup(TARGET, socket.AF_INET, ALLOW)
    full = b"\xff" * 256
    ips = ("10.3.1.1", "10.3.2.1", "10.3.3.1")
    for ip in ips:
        lookup.add(ip, 1)
        assert lookup.next() == (ip, 1)
        lookup.sent()
    lookup.settle(kc.Response(b"t", TARGET, seeds_filter=full, peers_filter=dht_bloom.EMPTY), ips[0])
    lookup.settle(kc.ErrorReply(b"t", 202, "server error"), ips[1])
    lookup.settle(kc.Response(b"t", bytes(20), peers_filter=dht_bloom.of_ips(["192.0.2.1"])), ips[2])
    r = lookup.result()
    assert r.implausible == 1 and r.errors == 1 and r.answered == 2 and r.filters == 1
    assert r.seeds == 0 and r.peers == pytest.approx(1, abs=0.01) and r.ok and not r.saturated
