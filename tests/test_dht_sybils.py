"""What a holder of one address block can do to a DHT scrape's estimate (crawler/sources/dht/dht_node_ids.py).

Eight sybils in one /24 with ids next to the hash used to be the eight
nodes nearest it, and so the only filters in the union: empty filters set
the estimate to 0, filters of 1,000 IPs each to saturation, whatever the
honest node nearby held. A lookup now asks one node per /24 (/64 for IPv6),
so the sybils put one filter in the union beside the honest node's: the
estimate moves by that one filter's worth at most. Shown on loopback with
real KRPC nodes (loopback is exempt from BEP 42, so the /24 rule alone is
at work), then on public addresses in the pure lookup, where BEP 42 leaves
out the filters of nodes whose ids their addresses do not allow.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
import time

import pytest
from gevent.server import DatagramServer
from hypothesis import given
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.sources.addresses import policy
from crawler.sources.dht import dht_bloom, dht_node_ids
from crawler.sources.dht import krpc_codec as kc
from crawler.sources.dht.dht_scrape import ScrapeLookup, scrape
from crawler.sources.dht.krpc_socket import KrpcSocket

ALLOW = policy(True)
IH = hashlib.sha1(b"peercrawl-sybils").digest()
TARGET = int.from_bytes(IH, "big")
SEEDS = [f"198.51.100.{i}" for i in range(1, 11)]
PEERS = [f"203.0.113.{i}" for i in range(1, 51)]


def near(k: int) -> bytes:
    """An id ``k`` away from the hash (XOR distance)."""
    return (TARGET ^ k).to_bytes(20, "big")


def bound(n: float) -> float:
    return 3 * dht_bloom.standard_error(n) + 1


def heavy(i: int) -> bytes:
    """A plausible filter of 1,000 IPs of its own (sybil ``i``)."""
    return dht_bloom.of_ips(f"10.{i}.{j // 250}.{j % 250}" for j in range(1000))


# --- BEP 42 ---------------------------------------------------------------------------------

# BEP 42's test vectors: IP, rand (the id's last byte), an id it allows
VECTORS = [
    ("124.31.75.21", 1, "5fbfbff10c5d6a4ec8a88e4c6ab4c28b95eee401"),
    ("21.75.31.124", 86, "5a3ce9c14e7a08645677bbd1cfe7d8f956d53256"),
    ("65.23.51.170", 22, "a5d43220bc8f112a3d426c84764f8c2a1150e616"),
    ("84.124.73.14", 65, "1b0321dd1bb1fe518101ceef99462b947a01ff41"),
    ("43.213.53.83", 90, "e56f6cbf5b7c4be0237986d5243b87aa6d51305a"),
]


@pytest.mark.parametrize("ip,rand,example", VECTORS)
def test_bep42_vectors(ip, rand, example):
    node_id = bytes.fromhex(example)
    assert dht_node_ids.valid_id(node_id, ip)
    assert dht_node_ids.id_prefix(ip, rand) >> 11 == int.from_bytes(node_id[:3], "big") >> 3
    assert dht_node_ids.make_id(ip, rand, node_id) == node_id
    other = str(ipaddress.ip_address(ip) + 1)  # the next address: its ids start elsewhere
    assert not dht_node_ids.valid_id(node_id, other)
    assert not dht_node_ids.valid_id(bytes([node_id[0] ^ 0x80]) + node_id[1:], ip)


def test_crc32c_check_value_and_exempt_networks():
    assert dht_node_ids.crc32c(b"123456789") == 0xE3069283  # the CRC catalogue's check value
    for ip in ("10.1.2.3", "172.31.0.1", "192.168.9.9", "169.254.1.1", "127.0.50.1", "::1", "fe80::1", "fd00::1",
               "::ffff:127.0.0.1"):
        assert dht_node_ids.exempt(ip) and dht_node_ids.valid_id(bytes(20), ip), ip
    for ip in ("172.32.0.1", "8.8.8.8", "2001:db8::1", "::ffff:8.8.8.8", "100.64.0.1"):
        assert not dht_node_ids.exempt(ip), ip
    with pytest.raises(ValueError):
        dht_node_ids.valid_id(bytes(19), "8.8.8.8")


addresses = st.ip_addresses().map(str)


@given(addresses, st.integers(0, 255), st.binary(min_size=20, max_size=20), st.integers(0, 20))
def test_made_ids_pass_and_any_flip_of_their_21_bits_fails(ip, r, base, bit):
    node_id = dht_node_ids.make_id(ip, r, base)
    assert dht_node_ids.valid_id(node_id, ip)
    assert node_id[3:19] == base[3:19] and node_id[19] == r
    flipped = (int.from_bytes(node_id, "big") ^ (1 << (159 - bit))).to_bytes(20, "big")
    assert dht_node_ids.valid_id(flipped, ip) == dht_node_ids.exempt(ip)


@given(addresses, st.binary(min_size=20, max_size=20))
def test_any_id_is_judged_without_an_error(ip, node_id):
    assert dht_node_ids.valid_id(node_id, ip) in (True, False)


@given(st.ip_addresses(v=4), st.integers(0, 255))
def test_prefix_is_the_slash_24_and_a_mapped_address_keeps_it(a, low):
    other = ipaddress.IPv4Address((int(a) & ~0xFF) | low)
    assert dht_node_ids.prefix(str(a)) == dht_node_ids.prefix(str(other)) == a.packed[:3]
    assert dht_node_ids.prefix(f"::ffff:{a}") == a.packed[:3]
    assert dht_node_ids.prefix(str(ipaddress.IPv4Address(int(a) ^ 0x100))) != a.packed[:3]


@given(st.text(max_size=60))
def test_prefix_of_any_text_is_a_prefix_or_one_value_error(text):
    try:
        net = dht_node_ids.prefix(text)
    except ValueError:
        return
    assert len(net) in (3, 8) and net == dht_node_ids.prefix(str(ipaddress.ip_address(text.split("%")[0])))


@given(st.ip_addresses(v=6), st.integers(0, 2**64 - 1), st.integers(64, 127))
def test_prefix_of_ipv6_is_the_slash_64(a, low, bit):
    if a.ipv4_mapped is not None:
        return
    same = ipaddress.IPv6Address((int(a) >> 64 << 64) | low)
    assert dht_node_ids.prefix(str(a)) == dht_node_ids.prefix(str(same)) == a.packed[:8]
    if same.ipv4_mapped is None:
        moved = ipaddress.IPv6Address(int(a) ^ (1 << bit))
        assert dht_node_ids.prefix(str(moved)) != a.packed[:8]


# --- sybils on loopback -------------------------------------------------------------------


class FakeNode(DatagramServer):
    """A KRPC node on loopback: answers a get_peers with its id, the nodes it lists and its filters."""

    def __init__(self, ip: str, node_id: bytes, seeds: bytes, peers: bytes):
        super().__init__((ip, 0))
        self.node_id, self.seeds, self.peers = node_id, seeds, peers
        self.listed: tuple = ()
        self.asked = 0

    def handle(self, data, address):
        self.asked += 1
        tid = bencode.decode(data)[b"t"]
        reply = kc.Response(tid, self.node_id, nodes=self.listed, seeds_filter=self.seeds, peers_filter=self.peers,
                            token=b"tk")
        self.socket.sendto(kc.response(reply), address)


@pytest.mark.parametrize("kind", ["empty", "heavy"])
def test_eight_sybils_in_one_slash_24_move_the_estimate_by_one_node_at_most(kind):
    honest = FakeNode("127.0.60.1", near(1 << 100), dht_bloom.of_ips(SEEDS), dht_bloom.of_ips(PEERS))
    sybils = [FakeNode(f"127.0.50.{i}", near(i), dht_bloom.EMPTY if kind == "empty" else heavy(i),
                       dht_bloom.EMPTY if kind == "empty" else heavy(100 + i)) for i in range(1, 9)]
    nodes = [honest, *sybils]
    for n in nodes:
        n.start()
    listed = tuple(kc.Node(n.node_id, n.address[0], n.address[1]) for n in nodes)
    for n in nodes:
        n.listed = listed  # every node knows them all; the sybils are the nearest the hash
    try:
        with KrpcSocket(bind=("127.0.61.1", 0), node_rate=50, overall_rate=500) as sock:
            r = scrape(sock, IH, [sybils[0].address, honest.address], time.monotonic() + 10, check=ALLOW,
                       timeout=1.0)
    finally:
        for n in nodes:
            n.stop()
    assert r.ok and r.timeouts == 0 and r.filters == 2 and r.shared >= 7, r
    assert sum(s.asked for s in sybils) == 1 and honest.asked == 1
    if kind == "empty":
        # the sybil's empty filters add nothing: the unions are the honest node's
        assert r.peers_filter == dht_bloom.of_ips(PEERS) and r.seeds_filter == dht_bloom.of_ips(SEEDS)
        assert abs(r.peers - 50) <= bound(50) and abs(r.seeds - 10) <= bound(10)
    else:
        one = dht_bloom.estimate(heavy(1))  # one sybil's worth
        assert abs(one - 1000) <= bound(1000)
        assert 50 - bound(50) <= r.peers <= 50 + one + bound(50 + one), (r.peers, one)
        assert not r.saturated


# --- BEP 42 in the lookup ---------------------------------------------------------------------


def test_public_nodes_whose_ids_break_bep42_route_but_add_no_filter():
    """Eight sybils in eight public /24s with ids next to the hash; an honest node with a BEP 42 id."""
    honest_ip = "192.0.2.1"
    honest_id = dht_node_ids.make_id(honest_ip, 3, near(1 << 150))
    sybil_ips = [f"198.18.{i}.7" for i in range(1, 9)]
    assert not any(dht_node_ids.valid_id(near(i), ip) for i, ip in enumerate(sybil_ips, 1))
    lookup = ScrapeLookup(IH, socket.AF_INET, ALLOW)
    lookup.add(sybil_ips[0], 6881)
    lookup.add(honest_ip, 6881)
    listed = tuple(kc.Node(near(i), ip, 6881) for i, ip in enumerate(sybil_ips, 1))
    replies = {ip: kc.Response(b"t", near(i), listed, seeds_filter=heavy(i), peers_filter=heavy(100 + i))
               for i, ip in enumerate(sybil_ips, 1)}
    replies[honest_ip] = kc.Response(b"t", honest_id, listed, seeds_filter=dht_bloom.of_ips(SEEDS),
                                     peers_filter=dht_bloom.of_ips(PEERS))
    asked = []
    while True:
        address = lookup.next()
        if address is None:
            if lookup.in_flight == 0:
                break
            continue
        lookup.sent()
        asked.append(address[0])
        lookup.settle(replies[address[0]], address[0])
    r = lookup.result()
    assert set(asked) == {honest_ip, *sybil_ips}  # the sybils were asked: they route
    assert r.unverified == 8 and r.filters == 1
    assert r.peers_filter == dht_bloom.of_ips(PEERS) and r.seeds_filter == dht_bloom.of_ips(SEEDS)
