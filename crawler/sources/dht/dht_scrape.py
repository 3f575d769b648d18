"""DHT scrapes (BEP 33): how many seeds and peers a torrent's DHT swarm holds, from the nodes' bloom filters.

Use (a visit's greenlet; ``sock`` shared by the process's scrapes)::

    sock = KrpcSocket(bind=("0.0.0.0", 0))
    result = scrape(sock, info_hash, contacts, time.monotonic() + 10, check=addresses.policy(allow_private))
    result.seeds, result.peers          # estimates; result.seeds_error, result.peers_error: one sigma

The lookup is BEP 5's iterative one for ``get_peers``, each query with
``scrape=1``: ask the contacts, then always the unasked nodes closest to the
info-hash (XOR distance of their ids), ``alpha`` queries in flight, one
node per network prefix (/24 of IPv4, /64 of IPv6: the first the lookup
hears of; ``dht_node_ids.prefix``), each once, until the ``closest`` nodes
that answered are all closer than any node left to ask, or ``max_queries``
were sent, or the deadline. Each query waits for its place
under the socket's pacing (``krpc_socket.SendPacer``); a node whose place
would come after the deadline is passed over (``paced``). The contacts are
``(host, port)``; a name is resolved. Every address, contact or learned from
``nodes``, goes through the address policy (``check``, contract §3), and is
passed over (``refused``) when refused.

The estimate. A node storing peers for the hash answers with ``BFsd``
(seeds) and ``BFpe`` (the others); announces are scattered over the nodes
near the hash, none holding all, so the filters of the ``closest`` (8)
nodes nearest the hash that sent filters are ORed (the union of their sets,
each IP once) and each union's size estimated (``dht_bloom``: error about
1.6 % at 200 IPs, 2.3 % at 2,000). Filters that claim more than a BEP 33
node keeps (6,000 IPs) are left out (``implausible``), so one hostile node
cannot fill the union. So are the filters of a node whose id BEP 42 does
not allow its address (``unverified``; ``dht_node_ids.valid_id``: nodes on
local networks are exempt): BEP 42 says never to store data on such a node,
and a node that may pick its id may have picked it next to the hash. Such a
node is still asked and its ``nodes`` followed (many honest nodes run
without BEP 42; they only route). With one node per prefix, whoever holds
one prefix puts at most one filter in the union (and one per family: the
IPv4 and IPv6 scrapes are unioned). A libtorrent node fills its filters with the peers of
the asker's family only: a scrape over an IPv4 socket counts the IPv4
swarm, over IPv6 the IPv6 one; ``dht_bloom.union`` of the two results'
filters counts both. ``values`` lists from nodes without BEP 33 are not
counted.
"""

from __future__ import annotations

import bisect
import socket as _stdsocket
import time
from collections.abc import Iterable
from dataclasses import dataclass

from gevent.pool import Group
from gevent.queue import Empty, Queue

from crawler import spawning
from crawler.errors import PeercrawlError
from crawler.sources.addresses import AddressCheck, AddressRefused, Resolver, policy, resolve
from crawler.sources.dht import dht_bloom, dht_node_ids, krpc_codec
from crawler.sources.dht.krpc_socket import Address, KrpcSocket, Reply

ALPHA = 3  # queries in flight (BEP 5's alpha; BEP 33 suggests 3 for scrapes)
CLOSEST = 8  # K: the nodes whose filters are unioned, and the ones a lookup converges on
MAX_QUERIES = 64  # a lookup on the public DHT converges in some 20-40
QUERY_TIMEOUT = 2.0  # seconds a query waits for its reply once sent
MAX_CANDIDATES = 256  # unasked nodes kept, the closest first


@dataclass(frozen=True)
class DhtScrapeResult:
    """What one scrape found.

    ``seeds`` and ``peers``: the estimated IPs in the unions of ``BFsd`` and
    ``BFpe`` (``seeds_filter``, ``peers_filter``), with ``seeds_error`` and
    ``peers_error`` their standard errors; ``filters``: how many nodes'
    filters are in the unions. ``answered``: nodes that replied; ``queries``
    started (sent, or waiting for their place when the lookup ended); ``timeouts`` (no reply), ``errors`` (KRPC error replies),
    ``refused`` (addresses the policy refused, or contacts that did not
    resolve), ``paced`` (nodes passed over for pacing), ``implausible``
    (filters left out for their size), ``unverified`` (filters left out:
    the node's id and address break BEP 42), ``shared`` (listings of nodes
    passed over: another node of their prefix was taken). ``ok``: some node
    answered.
    """
    info_hash: str
    seeds: float
    peers: float
    seeds_error: float
    peers_error: float
    seeds_filter: bytes
    peers_filter: bytes
    filters: int
    answered: int
    queries: int
    timeouts: int = 0
    errors: int = 0
    refused: int = 0
    paced: int = 0
    implausible: int = 0
    unverified: int = 0
    shared: int = 0
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        """Some node answered (a scrape nobody answered counts nothing, not an empty swarm)."""
        return self.answered > 0

    @property
    def saturated(self) -> bool:
        """A union has every bit set: its estimate is only a lower bound."""
        return dht_bloom.saturated(self.seeds_filter) or dht_bloom.saturated(self.peers_filter)


class ScrapeLookup:
    """The state of one scrape, pure: which node to ask next, what the replies taught.

    ``family``: the socket's (AF_INET follows ``nodes``, AF_INET6 ``nodes6``).
    ``check(ip, what)`` raises ``AddressRefused`` for a node not to contact.
    """

    def __init__(self, info_hash: bytes, family: int, check: AddressCheck, closest: int = CLOSEST,
                 max_queries: int = MAX_QUERIES):
        if len(info_hash) != 20:
            raise ValueError("an info-hash has 20 bytes")
        self.target = int.from_bytes(info_hash, "big")
        self.info_hash = info_hash
        self.family = family
        self.check = check
        self.closest = closest
        self.max_queries = max_queries
        self._waiting: list[tuple[int, int, str, int]] = []  # (distance, order, ip, port), closest first
        self._seen: dict[bytes, str] = {}  # prefix (dht_node_ids.prefix) -> the IP taken as its candidate
        self._order = 0
        self._near: list[int] = []  # distances of the closest nodes that answered
        self._filters: list[tuple[int, bytes, bytes]] = []  # (distance, BFsd, BFpe), closest first
        self.in_flight = 0
        self.queries = self.answered = self.timeouts = self.errors = 0
        self.refused = self.paced = self.implausible = self.unverified = self.shared = 0

    def add(self, ip: str, port: int, node_id: bytes | None = None) -> None:
        """A node to ask: a contact (no id: asked first, in order) or one from a reply's nodes.

        Passed over when its prefix already has a node in the lookup: counted
        (``shared``) when that node has another IP.
        """
        if not 0 < port < 65536:
            return
        net = dht_node_ids.prefix(ip)
        taken = self._seen.get(net)
        if taken is not None:
            self.shared += taken != ip
            return
        try:
            self.check(ip, f"DHT node {ip}:{port}")
        except AddressRefused:
            self.refused += 1
            return
        self._seen[net] = ip
        distance = -1 if node_id is None else int.from_bytes(node_id, "big") ^ self.target
        self._order += 1
        bisect.insort(self._waiting, (distance, self._order, ip, port))
        del self._waiting[MAX_CANDIDATES:]

    def next(self) -> Address | None:
        """The next node worth asking (taken off the list), or None: none left, or the lookup converged."""
        if self.queries >= self.max_queries or not self._waiting:
            return None
        distance, _, ip, port = self._waiting[0]
        if len(self._near) >= self.closest and distance >= self._near[-1]:
            return None  # every node left is farther than the closest that answered
        del self._waiting[0]
        return ip, port

    def sent(self) -> None:
        """The node ``next`` gave is being asked."""
        self.in_flight += 1
        self.queries += 1

    def passed_over(self) -> None:
        """The node ``next`` gave could not be asked before the deadline."""
        self.paced += 1

    def settle(self, reply: Reply | None, ip: str) -> None:
        """The outcome of one query to ``ip``: its reply, or None (no reply)."""
        self.in_flight -= 1
        if reply is None:
            self.timeouts += 1
            return
        if isinstance(reply, krpc_codec.ErrorReply):
            self.errors += 1
            return
        self.answered += 1
        distance = int.from_bytes(reply.node_id, "big") ^ self.target
        bisect.insort(self._near, distance)
        del self._near[self.closest:]
        if reply.seeds_filter is not None or reply.peers_filter is not None:
            seeds = reply.seeds_filter or dht_bloom.EMPTY
            peers = reply.peers_filter or dht_bloom.EMPTY
            if not dht_node_ids.valid_id(reply.node_id, ip):
                self.unverified += 1
            elif dht_bloom.plausible(seeds) and dht_bloom.plausible(peers):
                bisect.insort(self._filters, (distance, seeds, peers))
            else:
                self.implausible += 1
        for node in reply.nodes if self.family == _stdsocket.AF_INET else reply.nodes6:
            self.add(node.ip, node.port, node.node_id)

    def result(self, elapsed: float = 0.0) -> DhtScrapeResult:
        """The estimates from the filters of the ``closest`` nodes nearest the hash that sent them."""
        used = self._filters[: self.closest]
        seeds = dht_bloom.union(s for _, s, _ in used)
        peers = dht_bloom.union(p for _, _, p in used)
        n_seeds, n_peers = dht_bloom.estimate(seeds), dht_bloom.estimate(peers)
        return DhtScrapeResult(
            info_hash=self.info_hash.hex(), seeds=n_seeds, peers=n_peers,
            seeds_error=dht_bloom.standard_error(n_seeds), peers_error=dht_bloom.standard_error(n_peers),
            seeds_filter=seeds, peers_filter=peers, filters=len(used), answered=self.answered,
            queries=self.queries, timeouts=self.timeouts, errors=self.errors, refused=self.refused,
            paced=self.paced, implausible=self.implausible, unverified=self.unverified, shared=self.shared,
            elapsed=elapsed,
        )


def scrape(sock: KrpcSocket, info_hash: bytes | str, contacts: Iterable[tuple[str, int]], deadline: float, *,
           check: AddressCheck | None = None, alpha: int = ALPHA, timeout: float = QUERY_TIMEOUT,
           max_queries: int = MAX_QUERIES, closest: int = CLOSEST, resolver: Resolver | None = None
           ) -> DhtScrapeResult:
    """Scrape ``info_hash`` (20 bytes or 40 hex) through the DHT, starting from ``contacts``, by ``deadline``.

    ``deadline``: ``time.monotonic()`` time. ``check``: the address policy
    (default: public addresses only). Blocks the calling greenlet only; every
    network outcome is in the result (``ok`` False when nobody answered).
    Raises ``ValueError`` for a malformed info-hash.
    """
    start = time.monotonic()
    ih = bytes.fromhex(info_hash) if isinstance(info_hash, str) else bytes(info_hash)
    lookup = ScrapeLookup(ih, sock.family, check or policy(False), closest, max_queries)
    for host, port in contacts:
        try:
            found = resolve(host, port, lookup.check, f"DHT contact {host}:{port}", resolver)
        except PeercrawlError:
            lookup.refused += 1
            continue
        for family, sockaddr in found:
            if family == sock.family:
                lookup.add(sockaddr[0], port)
    inbox: Queue = Queue()
    asking = Group()

    def query(tid: bytes) -> bytes:
        return krpc_codec.get_peers(tid, sock.node_id, ih)

    def ask(address: Address, at: float) -> None:
        inbox.put((sock.ask(address, query, at, timeout), address[0]))

    try:
        while True:
            while lookup.in_flight < alpha and (address := lookup.next()) is not None:
                at = sock.reserve(address[0], deadline)
                if at is None:
                    lookup.passed_over()
                    continue
                lookup.sent()
                spawning.spawn_in(asking, ask, address, at)
            left = deadline - time.monotonic()
            if lookup.in_flight == 0 or left <= 0:
                break
            try:
                reply, ip = inbox.get(timeout=left)
            except Empty:
                break
            lookup.settle(reply, ip)
    finally:
        asking.kill()  # the queries still waiting (at the deadline) leave the socket's table
    return lookup.result(time.monotonic() - start)
