"""A swarm of libtorrent DHT nodes on loopback, for tests and benchmarks.

Each node is a real ``libtorrent.session`` (DHT only) bound to its own
loopback address 127.0.0.x: libtorrent bans a source address that sends it
more than ``dht_block_ratelimit`` (5) packets a second, so many nodes on
127.0.0.1 ban each other during bootstrap. The swarm nodes also raise that
limit, because the crawler under test queries them far faster than a real
node would be queried by one peer. Routing/search IP restrictions and node-id
enforcement are off (every node shares 127.0.0.0/24), and the nodes are
bootstrapped to each other directly with ``add_dht_node``.

Use::

    with Swarm(size=12, first_ip=20) as swarm:
        expected = swarm.announce(info_hash_hex, nodes=[0, 1, 2], port_base=7000)
        swarm.wait_announced({info_hash_hex: expected})
        settings = Settings(dht_bootstrap=tuple(swarm.endpoints[:4]), allow_private=True, ...)

or, as a module-scoped pytest fixture (import it into the test module)::

    from tests.dht_swarm import dht_swarm, HASH_A  # noqa: F401
    def test_x(dht_swarm): dht_swarm.expected[HASH_A]  # {(ip, port), ...}

``plain_lookup`` is the bare libtorrent loop (``dht_get_peers`` +
``wait_for_alert``) used both to check announces and as the benchmark's
baseline.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from contextlib import contextmanager
from typing import Self

import libtorrent as lt
import pytest

# Test info-hashes: A announced by 3 nodes, B by 6, C by nobody.
HASH_A = hashlib.sha1(b"peercrawl-test-A").hexdigest()
HASH_B = hashlib.sha1(b"peercrawl-test-B").hexdigest()
HASH_C = hashlib.sha1(b"peercrawl-test-C-nobody").hexdigest()
DEFAULT_ANNOUNCEMENTS = {HASH_A: ([0, 3, 5], 7000), HASH_B: ([1, 2, 4, 6, 8, 10], 8000)}


def node_params(ip: str, **extra) -> dict:
    """Settings pack of one swarm node listening on ``ip`` (IPv4 or IPv6; any free port)."""
    params = {
        "listen_interfaces": f"[{ip}]:0" if ":" in ip else f"{ip}:0",
        "enable_dht": True,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "dht_bootstrap_nodes": "",
        "dht_restrict_routing_ips": False,
        "dht_restrict_search_ips": False,
        "dht_enforce_node_id": False,
        "dht_prefer_verified_node_ids": False,
        "dht_ignore_dark_internet": False,
        # Test swarm only: the crawler sends many queries from one address.
        "dht_block_ratelimit": 1_000_000,
        "dht_upload_rate_limit": 400_000,
        "recv_socket_buffer_size": 4 * 1024 * 1024,
        "send_socket_buffer_size": 4 * 1024 * 1024,
        "alert_mask": 0,
    }
    params.update(extra)
    return params


def routing_nodes(session) -> int:
    """Nodes in ``session``'s routing table (a blocking libtorrent call)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return session.status().dht_nodes


class Swarm:
    """``size`` DHT nodes on 127.0.0.``first_ip`` .. 127.0.0.``first_ip+size-1``, or on ``ips`` when given.

    ``node_extra``: settings overriding ``node_params`` on every node (e.g.
    libtorrent's own ``dht_block_ratelimit`` of 5, to test pacing).
    ``start(timeout)`` (called by ``__enter__``) raises ``RuntimeError`` if
    the nodes do not all know each other in time.
    """

    def __init__(self, size: int = 12, first_ip: int = 20, prefix: str = "127.0.0.", node_extra: dict | None = None,
                 ips: list[str] | None = None):
        if not (0 < first_ip and first_ip + size <= 255):
            raise ValueError("swarm addresses must fit in one /24")
        self.ips = list(ips) if ips else [f"{prefix}{first_ip + i}" for i in range(size)]
        self.size = len(self.ips)
        self.node_extra = dict(node_extra or {})
        self.nodes: list = []
        self.endpoints: list[tuple[str, int]] = []

    def start(self, timeout: float = 15.0) -> Self:
        self.nodes = [lt.session(node_params(ip, **self.node_extra)) for ip in self.ips]
        self.endpoints = [(ip, s.listen_port()) for ip, s in zip(self.ips, self.nodes)]
        for i, s in enumerate(self.nodes):
            for j, ep in enumerate(self.endpoints):
                if i != j:
                    s.add_dht_node(ep)
        want = min(self.size - 1, 8)
        end = time.monotonic() + timeout
        while True:
            counts = [routing_nodes(s) for s in self.nodes]
            if min(counts) >= want:
                return self
            if time.monotonic() > end:
                self.close()
                raise RuntimeError(f"swarm did not bootstrap in {timeout}s: routing tables {counts}")
            time.sleep(0.1)

    def announce(self, info_hash_hex: str, nodes: list[int], port_base: int) -> set[tuple[str, int]]:
        """Nodes ``nodes`` announce ``info_hash_hex`` with ports ``port_base + i``.

        Returns the peers a lookup should find: ``{(ip of node i, port_base + i)}``.
        """
        ih = lt.sha1_hash(bytes.fromhex(info_hash_hex))
        expected = set()
        for i in nodes:
            self.nodes[i].dht_announce(ih, port_base + i, 0)
            expected.add((self.ips[i], port_base + i))
        return expected

    def wait_announced(self, expected: dict[str, set], timeout: float = 10.0, probe_ip: str = "127.0.0.250"):
        """Block until a fresh probe node's lookups return exactly ``expected``.

        ``expected``: info-hash hex -> the peers ``announce`` returned.
        Raises ``RuntimeError`` naming the first hash not visible in time.
        """
        probe = lt.session(node_params(probe_ip, alert_mask=lt.alert.category_t.dht_operation_notification,
                                       dht_read_only=True))
        try:
            for ep in self.endpoints:
                probe.add_dht_node(ep)
            end = time.monotonic() + timeout
            for ih, peers in expected.items():
                found: set = set()
                while found != peers:
                    if time.monotonic() > end:
                        raise RuntimeError(f"announce of {ih} not visible: want {peers}, found {found}")
                    found = plain_lookup(probe, ih, len(peers), min(2.0, max(end - time.monotonic(), 0.01)))
                    if found != peers:
                        time.sleep(0.1)
        finally:
            del probe

    def close(self) -> None:
        self.nodes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def plain_lookup(session, info_hash_hex: str, want: int, timeout: float) -> set[tuple[str, int]]:
    """One bare libtorrent lookup: ``dht_get_peers`` then ``wait_for_alert``.

    Returns the peers gathered once ``want`` were seen or ``timeout`` passed.
    ``session`` must have ``dht_operation_notification`` in its alert mask.
    """
    ih = lt.sha1_hash(bytes.fromhex(info_hash_hex))
    session.dht_get_peers(ih)
    found: set = set()
    end = time.monotonic() + timeout
    while len(found) < want:
        left = end - time.monotonic()
        if left <= 0:
            break
        if session.wait_for_alert(int(left * 1000) + 1) is None:
            continue
        for a in session.pop_alerts():
            if type(a) is lt.dht_get_peers_reply_alert and a.info_hash == ih:
                found.update(a.peers())
    return found


@contextmanager
def announced_swarm(size: int = 12, first_ip: int = 20, announcements: dict | None = None,
                    node_extra: dict | None = None):
    """A started swarm whose ``expected`` maps each announced hash to its peers.

    ``announcements``: info-hash hex -> (node indexes, port base); default
    ``DEFAULT_ANNOUNCEMENTS``. ``node_extra``: see ``Swarm``. Waits until
    every announce is visible.
    """
    with Swarm(size=size, first_ip=first_ip, node_extra=node_extra) as swarm:
        plan = DEFAULT_ANNOUNCEMENTS if announcements is None else announcements
        swarm.expected = {ih: swarm.announce(ih, nodes, port_base) for ih, (nodes, port_base) in plan.items()}
        swarm.wait_announced(swarm.expected)
        yield swarm


@pytest.fixture(scope="module")
def dht_swarm():
    """12 nodes on 127.0.0.20-31 with HASH_A and HASH_B announced (HASH_C not)."""
    with announced_swarm() as swarm:
        yield swarm
