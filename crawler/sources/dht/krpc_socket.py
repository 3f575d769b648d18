"""The socket of DHT scrapes: one gevent UDP socket that moves KRPC datagrams, and the pacing of what it sends.

Strategy (as ``crawler.sources.trackers.udp_client``): one socket may serve every
scrape of a process at once. A reader greenlet hands each reply to the
query waiting on its transaction id if, and only if, it came from the
address that query went to; anything else (a stray, a spoof, a late reply,
a query, malformed bytes) is dropped and counted, never believed.
Transaction ids are 4 random bytes, unique among the queries pending, so a
reply cannot be guessed by whoever cannot see our packets. The node id is
random and every query says ``ro=1`` (BEP 43): nobody puts this socket in a
routing table, so nobody queries it.

Floods. The socket is open as long as the worker runs and every node ever
asked knows its port, while decoding a datagram costs up to a few
milliseconds (``krpc_codec``'s bounds: 2,000 values). So the reader looks
at the sender first: a datagram from an address no query is waiting on is
dropped unread (``unsolicited``), at the cost of one ``recvfrom``. An
address a query waits on is decoded, but only ``MAX_STRIKES`` datagrams
that answer nothing (malformed, or on no pending transaction id) are
allowed it: then its queries end at once with no reply and its datagrams
go unread until a new query goes there (``given_up``). What is kept per
address lives only while a query waits on it, so that memory is bounded by
the queries pending. And the reader gives the hub a turn every few
datagrams or milliseconds (``socket_turns``), so even a flood it must read
never holds the rest of the worker up for long.

Pacing (``SendPacer``, pure): libtorrent ignores an address that sent it 50
packets within 10 s (``docs/dht.md``, "Pacing per remote node"), so every
message waits for its place under two rates: ``node_rate`` messages/s to any
one IP and ``overall_rate`` in all, each as an even spacing (no bursts). A
scrape sends a node one query, so the rate to one node binds only where
scrapes share nodes: their contacts, and the nodes close to a hash scraped
twice at once. A node counts packets per source IP, not per port: this
socket's ``node_rate`` and the libtorrent node's ``PEERCRAWL_DHT_NODE_RATE``
add up at a node both ask, and together must stay under libtorrent's 5/s.
"""

from __future__ import annotations

import math
import os
import socket as _stdsocket
import time
from collections import deque
from collections.abc import Callable

import gevent
from gevent import socket
from gevent.event import AsyncResult

from crawler import spawning
from crawler.sources.dht import krpc_codec as codec
from crawler.sources.socket_turns import Turns

Address = tuple[str, int]
Reply = codec.Response | codec.ErrorReply

# Datagrams from an address a query waits on that answer nothing (malformed,
# or on a transaction id no query of it waits on) before it is given up: an
# honest node sends one reply per query, and a late one now and then.
MAX_STRIKES = 3
RECEIVE_BUFFER = 1 << 20  # bytes the kernel may hold for the reader (capped by net.core.rmem_max)


class SendPacer:
    """When the next message to an IP may go: ``node_rate`` per IP and ``overall_rate`` in all (messages/s).

    Pure: times come in as arguments. Raises ``ValueError`` for a rate that
    is not a positive finite number.
    """

    def __init__(self, node_rate: float, overall_rate: float):
        for name, rate in (("node_rate", node_rate), ("overall_rate", overall_rate)):
            if not (rate > 0 and math.isfinite(rate)):
                raise ValueError(f"{name} must be a positive number of messages per second, got {rate!r}")
        self._node_gap = 1.0 / node_rate
        self._overall_gap = 1.0 / overall_rate
        self._next_any = -math.inf
        # IP -> earliest time of its next message, with the order they were
        # set in. Places are taken at increasing times (each at least
        # overall_gap after the last) and at most a caller's patience ahead
        # (a scrape's deadline), so the entries still in the future are the
        # newest ones, at most (node_gap + patience) / overall_gap + 1 of
        # them; older ones are dropped as time passes them.
        self._next: dict[str, float] = {}
        self._order: deque[tuple[float, str]] = deque()

    def slot(self, ip: str, now: float) -> float:
        """The earliest time a message to ``ip`` may be sent (``now`` or later)."""
        return max(now, self._next_any, self._next.get(ip, -math.inf))

    def reserve(self, ip: str, now: float, latest: float = math.inf) -> float | None:
        """Take the first place for ``ip``: its time, or None (nothing taken) when it would be after ``latest``."""
        self._forget(now)
        at = self.slot(ip, now)
        if at > latest:
            return None
        self._next_any = at + self._overall_gap
        self._next[ip] = at + self._node_gap
        self._order.append((at + self._node_gap, ip))
        return at

    def remembered(self) -> int:
        """IPs whose next place is still ahead (or not yet forgotten)."""
        return len(self._next)

    def _forget(self, now: float) -> None:
        order, nxt = self._order, self._next
        while order and order[0][0] <= now:
            when, ip = order.popleft()
            if nxt.get(ip) == when:
                del nxt[ip]


def _key(ip: str, port: int) -> tuple[bytes, int]:
    """An address as compared: the IP's bytes (one form for every spelling), and the port.

    Raises ``OSError`` for text that is no IP address.
    """
    ip = ip.split("%", 1)[0]
    return _stdsocket.inet_pton(_stdsocket.AF_INET6 if ":" in ip else _stdsocket.AF_INET, ip), port


class _Awaited:
    """An address some queries wait on: how many, and the datagrams from it that answered none."""

    __slots__ = ("queries", "strikes")

    def __init__(self):
        self.queries = 0
        self.strikes = 0


class KrpcSocket:
    """A UDP socket for KRPC queries: ``sock`` (a gevent socket) or one bound to ``bind``.

    ``node_id``: ours in every query (random by default). ``on_sent``, when
    set, is told the address of every datagram sent. Counters: ``sent``,
    ``received`` (replies handed to a query), ``dropped`` (replies from an
    awaited address on no transaction id of its), ``malformed`` (datagrams
    from an awaited address the codec refused), ``unsolicited`` (datagrams
    dropped unread: from an address no query waits on, or given up),
    ``given_up`` (addresses given up, module note).
    """

    def __init__(self, sock: socket.socket | None = None, bind: Address = ("0.0.0.0", 0), *,
                 node_rate: float = 1.0, overall_rate: float = 100.0, node_id: bytes | None = None):
        if sock is None:
            family = _stdsocket.AF_INET6 if ":" in bind[0] else _stdsocket.AF_INET
            sock = socket.socket(family, _stdsocket.SOCK_DGRAM)
            try:
                # Room for the replies of many scrapes while the reader waits its turn.
                sock.setsockopt(_stdsocket.SOL_SOCKET, _stdsocket.SO_RCVBUF, RECEIVE_BUFFER)
            except OSError:
                pass
            try:
                sock.bind(bind)
            except OSError:
                sock.close()
                raise
        self._sock = sock
        self.family = sock.family
        self.node_id = node_id if node_id is not None else os.urandom(20)
        self.pacer = SendPacer(node_rate, overall_rate)
        self.on_sent: Callable[[Address], None] | None = None
        self._pending: dict[bytes, tuple[tuple, AsyncResult]] = {}
        self._awaited: dict[tuple, _Awaited] = {}
        self._closed = False
        self.sent = self.received = self.dropped = self.malformed = self.unsolicited = self.given_up = 0
        self.turns = Turns(sock.fileno())
        self._reader = spawning.spawn(self._read)

    @property
    def address(self) -> tuple:
        """The local address the socket is bound to."""
        return self._sock.getsockname()

    def awaiting(self) -> int:
        """Addresses some query waits on (what the reader keeps per address)."""
        return len(self._awaited)

    def reserve(self, ip: str, latest: float) -> float | None:
        """The monotonic time a query to ``ip`` may go (its place taken), or None if not before ``latest``."""
        return self.pacer.reserve(ip, time.monotonic(), latest)

    def ask(self, address: Address, build: Callable[[bytes], bytes], at: float, timeout: float) -> Reply | None:
        """Send ``build(transaction id)`` to ``address`` at ``at`` (from ``reserve``); its reply, or None.

        None: no reply within ``timeout`` seconds of sending, the send
        failed, the address was given up, or the socket closed. Blocks the
        calling greenlet only.
        """
        if self._closed:
            return None
        try:
            key = _key(address[0], address[1])
        except OSError:
            return None
        awaited = self._awaited.get(key)
        if awaited is None:
            awaited = self._awaited[key] = _Awaited()
        elif awaited.strikes >= MAX_STRIKES:
            return None
        tid = os.urandom(4)
        while tid in self._pending:
            tid = os.urandom(4)
        waiter: AsyncResult = AsyncResult()
        self._pending[tid] = (key, waiter)
        awaited.queries += 1
        try:
            # The loop's clock may lag the monotonic one: a timer can fire a
            # little early, and a place is never used before its time.
            while (delay := at - time.monotonic()) > 0:
                gevent.sleep(delay)
            if self._closed or waiter.ready():  # closed, or the address given up meanwhile
                return None
            try:
                self._sock.sendto(build(tid), address)
            except OSError:
                return None
            self.sent += 1
            if self.on_sent is not None:
                self.on_sent(address)
            return waiter.wait(timeout)
        finally:
            self._pending.pop(tid, None)
            awaited.queries -= 1
            if not awaited.queries:
                del self._awaited[key]

    def close(self) -> None:
        """Stop reading, close the socket; queries waiting get None."""
        if self._closed:
            return
        self._closed = True
        self._reader.kill(block=False)
        for _, waiter in list(self._pending.values()):
            waiter.set(None)
        self._sock.close()

    def __enter__(self) -> KrpcSocket:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self) -> None:
        while not self._closed:
            try:
                data, source = self._sock.recvfrom(codec.MAX_DATAGRAM + 1)
            except OSError:
                if self._closed:
                    return
                gevent.sleep(0.01)  # e.g. an ICMP error queued on the socket: never spin
                continue
            self._take(data, source)
            self.turns.took()

    def _take(self, data: bytes, source: tuple) -> None:
        """One datagram: the sender first (unread unless awaited), then the reply's transaction id."""
        key = _key(source[0], source[1])
        awaited = self._awaited.get(key)
        if awaited is None or awaited.strikes >= MAX_STRIKES:
            self.unsolicited += 1
            return
        try:
            reply = codec.decode(data)
        except codec.KrpcError:
            self.malformed += 1
            self._strike(key, awaited)
            return
        entry = self._pending.get(reply.transaction_id)
        if entry is None or entry[1].ready() or entry[0] != key:
            self.dropped += 1
            self._strike(key, awaited)
            return
        self.received += 1
        entry[1].set(reply)

    def _strike(self, key: tuple, awaited: _Awaited) -> None:
        awaited.strikes += 1
        if awaited.strikes == MAX_STRIKES:
            self.given_up += 1
            for to, waiter in list(self._pending.values()):
                if to == key and not waiter.ready():
                    waiter.set(None)
