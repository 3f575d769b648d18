"""DHT scrapes (BEP 33) against real libtorrent nodes on loopback holding known swarms.

One swarm of 16 libtorrent nodes (127.33.1.1-127.33.16.1: a /24 each, as a
scrape asks one node per /24) stores three swarms, of 20,
200 and 2,000 peers (a quarter of them seeds). Each peer is put into the
nodes' storage for real: from its own loopback address (127.1.x.y for the
first hash, 127.2.x.y, 127.3.x.y: Linux routes all of 127.0.0.0/8 to lo) it
asks a node for a token (``get_peers``) and announces (``announce_peer``),
to two of the 8 nodes closest to the hash, so every one of them holds about
a quarter of the swarm and only their union holds all of it. The announces
carry the receiving node's own id and ``ro=1``, so no announcer enters a
routing table (libtorrent refuses its own id there) and the lookups meet
only the swarm's nodes.

The nodes keep up to 10,000 peers per hash (``dht_max_peers``, 500 by
default) and answer a plain ``get_peers`` with one peer at most
(``dht_max_peers_reply``), which keeps the filling's replies small;
libtorrent's ban is lifted as ``tests/dht_swarm.py`` does for every swarm.

The bound asserted on each estimate: |estimate - n| <= 3 sigma(n) + 1, with
sigma the filter's standard error (``dht_bloom.standard_error``: 0.3 at 20
IPs, 3.2 at 200, 46 at 2,000). Three sigma holds for 99.7 % of random IP
sets; the + 1 covers the estimate's steps at small n (two IPs sharing a
bit move it by half an IP). The sets here are fixed, so the outcome is too;
the unions are also checked bit for bit against ``dht_bloom.of_ips`` of the
announced IPs, which is what makes the estimate right.
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
from contextlib import contextmanager

import gevent
import pytest
from gevent.pool import Pool
from gevent.server import DatagramServer

from crawler.bencode import codec as bencode
from crawler.sources.addresses import AddressRefused, policy
from crawler.sources.dht import dht_bloom
from crawler.sources.dht import krpc_codec as kc
from crawler.sources.dht.dht_scrape import scrape
from crawler.sources.dht.krpc_socket import KrpcSocket
from tests.dht_swarm import Swarm

pytestmark = pytest.mark.slow

SIZES = (20, 200, 2000)
HASHES = [hashlib.sha1(b"peercrawl-scrape-%d" % n).digest() for n in SIZES]
NODE_IPS = [f"127.33.{i + 1}.1" for i in range(16)]
ALLOW = policy(True)


def bound(n: int) -> float:
    return 3 * dht_bloom.standard_error(n) + 1


class Filled:
    """The swarm, each node's id, and what was announced where."""

    def __init__(self, swarm: Swarm):
        self.swarm = swarm
        self.ids: dict[tuple, bytes] = {}
        self.seeds: dict[bytes, set[str]] = {}
        self.leechers: dict[bytes, set[str]] = {}
        self.stored: dict[tuple, tuple[set, set]] = {}  # (hash, node) -> (seeds, leechers)

    def near(self, ih: bytes) -> list[tuple]:
        target = int.from_bytes(ih, "big")
        return sorted(self.ids, key=lambda ep: int.from_bytes(self.ids[ep], "big") ^ target)[:8]


def ask_now(sock: KrpcSocket, endpoint, build, timeout: float = 1.0):
    return sock.ask(endpoint, build, time.monotonic(), timeout)


def announce(filled: Filled, ih: bytes, ip: str, seed: bool, endpoints) -> None:
    """``ip`` announces ``ih`` to each of ``endpoints``: a token, then announce_peer (three tries each).

    Both carry the node's own id, which its routing table refuses.
    """
    with KrpcSocket(bind=(ip, 0), node_rate=1000, overall_rate=100_000) as sock:
        for ep in endpoints:
            own = filled.ids[ep]

            def token_query(t: bytes, own: bytes = own) -> bytes:
                return kc.get_peers(t, own, ih, scrape=False)

            for _ in range(3):
                got = ask_now(sock, ep, token_query)
                if not isinstance(got, kc.Response) or got.token is None:
                    continue

                def announce_query(t: bytes, own: bytes = own, token: bytes = got.token) -> bytes:
                    return kc.announce_peer(t, own, ih, 6881, token, seed=seed)

                if isinstance(ask_now(sock, ep, announce_query), kc.Response):
                    break
            else:
                raise RuntimeError(f"{ip} could not announce to {ep}")
            seeds, leechers = filled.stored.setdefault((ih, ep), (set(), set()))
            (seeds if seed else leechers).add(ip)


@pytest.fixture(scope="module")
def filled():
    with filled_swarm() as f:
        yield f


@contextmanager
def filled_swarm():
    """The swarm with the SIZES swarms announced (also bench/bench_dht_scrape.py's)."""
    extra = {"dht_max_peers": 10_000, "dht_max_peers_reply": 1}
    with Swarm(ips=NODE_IPS, node_extra=extra) as swarm:
        f = Filled(swarm)
        with KrpcSocket(bind=("127.0.33.200", 0), node_rate=1000, overall_rate=100_000) as sock:
            for ep in swarm.endpoints:
                reply = ask_now(sock, ep, lambda t: kc.get_peers(t, sock.node_id, HASHES[0], scrape=False), 2.0)
                assert isinstance(reply, kc.Response), ep
                f.ids[ep] = reply.node_id
        pool = Pool(200)
        for h, (ih, n) in enumerate(zip(HASHES, SIZES)):
            near = f.near(ih)
            f.seeds[ih], f.leechers[ih] = set(), set()
            for i in range(n):
                ip = f"127.{1 + h}.{i // 250}.{i % 250 + 1}"
                seed = i % 4 == 0
                (f.seeds if seed else f.leechers)[ih].add(ip)
                pool.spawn(announce, f, ih, ip, seed, [near[i % 8], near[(i + 3) % 8]])
        pool.join(raise_error=True)
        yield f


def test_three_swarms_estimated_within_the_filters_error(filled):
    sent: list[tuple[float, str]] = []
    with KrpcSocket(bind=("127.0.33.201", 0), node_rate=4.0, overall_rate=200.0) as sock:
        sock.on_sent = lambda address: sent.append((time.monotonic(), address[0]))
        start = time.monotonic()
        contacts = filled.swarm.endpoints[:2]
        jobs = [gevent.spawn(scrape, sock, ih, contacts, start + 10, check=ALLOW) for ih in HASHES]
        gevent.joinall(jobs, raise_error=True)
    for ih, job in zip(HASHES, jobs):
        r = job.value
        seeds, leechers = filled.seeds[ih], filled.leechers[ih]
        assert r.ok and r.filters == 8 and r.timeouts == 0 and r.errors == 0, r
        # every storing node was reached: the unions are exactly the announced sets' filters
        assert r.seeds_filter == dht_bloom.of_ips(seeds)
        assert r.peers_filter == dht_bloom.of_ips(leechers)
        # ... which no single node holds
        assert all(stored[1] != leechers for (h, _), stored in filled.stored.items() if h == ih)
        assert abs(r.seeds - len(seeds)) <= bound(len(seeds)), (len(seeds), r.seeds)
        assert abs(r.peers - len(leechers)) <= bound(len(leechers)), (len(leechers), r.peers)
        n = len(seeds) + len(leechers)
        assert abs(r.seeds + r.peers - n) <= bound(n), (n, r.seeds + r.peers)
        assert r.queries <= 16 and not r.saturated
    # pacing: each node's queries go 1 / node_rate apart, all of them 1 / overall_rate apart; a
    # query leaves at its place or a little after (the greenlet's wake-up), so the times sent
    # are allowed 20 ms of lateness
    late = 0.02
    times = [t for t, _ in sent]
    assert all(times[i + 10] - times[i] >= 10 / 200.0 - late for i in range(len(times) - 10))
    by_ip: dict[str, list[float]] = {}
    for t, ip in sent:
        by_ip.setdefault(ip, []).append(t)
    assert max(len(ts) for ts in by_ip.values()) == 3  # the contacts are asked by every scrape
    assert all(b - a >= 0.25 - late for ts in by_ip.values() for a, b in zip(ts, ts[1:]))


def test_our_filter_is_the_one_libtorrent_sends(filled):
    ih = HASHES[1]
    with KrpcSocket(bind=("127.0.33.202", 0)) as sock:
        for ep in filled.near(ih)[:3]:
            reply = ask_now(sock, ep, lambda t: kc.get_peers(t, sock.node_id, ih), 2.0)
            seeds, leechers = filled.stored[(ih, ep)]
            assert reply.seeds_filter == dht_bloom.of_ips(seeds)
            assert reply.peers_filter == dht_bloom.of_ips(leechers)
            assert 0 < len(leechers) < len(filled.leechers[ih])
            assert reply.values == 0  # a scrape is answered with filters, not peers


class HostileNode(DatagramServer):
    """A KRPC node on loopback that claims the hash's own id, sends full filters and lists bad nodes."""

    def __init__(self, ip: str, ih: bytes):
        super().__init__((ip, 0))
        self.ih = ih

    def handle(self, data, address):
        tid = bencode.decode(data)[b"t"]
        nodes = tuple(kc.Node(bytes(19) + bytes([i]), f"127.0.66.{i}", 6881) for i in range(1, 40))
        reply = kc.Response(tid, self.ih, nodes=nodes, seeds_filter=b"\xff" * 256, peers_filter=b"\xff" * 256)
        self.socket.sendto(kc.response(reply), address)


def test_hostile_and_silent_nodes_do_not_spoil_the_estimate(filled):
    ih = HASHES[1]

    def check(ip: str, what: str) -> None:
        if ip.startswith("127.0.66."):
            raise AddressRefused(f"{what} refused")

    hostile = HostileNode("127.0.65.1", ih)
    hostile.start()
    try:
        with KrpcSocket(bind=("127.0.33.203", 0), node_rate=50, overall_rate=500) as sock:
            contacts = [hostile.address, ("127.0.67.1", 9), filled.swarm.endpoints[0]]
            r = scrape(sock, ih, contacts, time.monotonic() + 5, check=check, timeout=0.5)
    finally:
        hostile.stop()
    assert r.implausible == 1 and r.refused == kc.MAX_NODES and r.timeouts == 1
    assert r.filters == 8
    assert r.peers_filter == dht_bloom.of_ips(filled.leechers[ih])
    assert r.seeds_filter == dht_bloom.of_ips(filled.seeds[ih])


def test_nobody_answering_ends_by_the_deadline():
    with KrpcSocket(bind=("127.0.33.204", 0)) as sock:
        start = time.monotonic()
        r = scrape(sock, HASHES[0], [("127.0.91.1", 9), ("127.0.92.1", 9)], start + 1.0, check=ALLOW,
                   timeout=0.4)
        elapsed = time.monotonic() - start
    assert not r.ok and r.queries == 2 and r.timeouts == 2
    assert r.seeds == 0.0 and r.peers == 0.0 and r.filters == 0
    assert elapsed < 1.0


def test_default_policy_refuses_loopback_contacts(filled):
    with KrpcSocket(bind=("127.0.33.205", 0)) as sock:
        r = scrape(sock, HASHES[0], filled.swarm.endpoints[:3], time.monotonic() + 2)
    assert not r.ok and r.queries == 0 and r.refused == 3
    assert ipaddress.ip_address(filled.swarm.endpoints[0][0]).is_loopback
