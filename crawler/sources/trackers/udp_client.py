"""The UDP tracker exchange (BEP 15) on gevent sockets; its one state machine.

Exchanges: connect, then announce or scrape on the connection id.

Strategy: one socket per address family per worker process, shared by every
greenlet. A reader greenlet receives each datagram, reads (action,
transaction id) and hands it to the request waiting on that transaction id
if, and only if, it came from the address the request was sent to and carries
the expected action (or the error action). Anything else is a stray or a
spoof and is dropped and counted, never believed. The reader only peeks
at 8 bytes before that check (the reply is parsed by the request it
answers), and gives the hub a turn every few datagrams or milliseconds
(``socket_turns``), so a flood at the socket's port holds nothing up.

Connection ids are cached per tracker address for ``CONNECTION_TTL`` seconds
(BEP 15 lets a client use one for a minute); concurrent announces to a
tracker whose id expired wait for one shared connect, so a busy worker sends
about one connect per tracker per minute. A tracker that answers an announce
with an error while we used a cached id may have restarted and forgotten it:
the id is dropped and the announce retried once with a fresh connect.

Connection ids live in an ``Lru`` of ``cache_size`` tracker addresses, so a
crawl naming many trackers keeps the memory of its most recent ones.
``announce_many`` sends a batch of announces to one address from one
greenlet (``AnnounceBatch``, udp_batch), its replies cut to ``limit`` entries
before their peers are decoded.

Each request is tried ``retries`` times, each try waiting ``timeout`` seconds,
never past the caller's deadline. gevent.socket is used explicitly; nothing
here monkey-patches.
"""

from __future__ import annotations

import functools
import random
import socket as _stdsocket
import time
from collections.abc import Callable

import gevent
from gevent import socket
from gevent.event import AsyncResult, Event

from crawler import spawning
from crawler.sources.lru import Lru
from crawler.sources.socket_turns import Turns
from crawler.sources.trackers import udp_codec as codec
from crawler.sources.trackers.tracker_errors import TrackerRefused, TrackerTimeout
from crawler.sources.trackers.udp_batch import AnnounceBatch

# BEP 15: "A client can use a connection ID until one minute after it has
# received it." A little under, so a slow announce still arrives in time.
CONNECTION_TTL = 55.0
# The request kind (crawler.sources.request_counts) of a request's action.
KIND_OF = {codec.CONNECT: "connect", codec.SCRAPE: "scrape", codec.ANNOUNCE: "announce"}

# Datagrams read between two turns of the hub: more than a whole pool's replies, which arrive together
# and are each a few microseconds' work, so the visits they wake complete together and are recorded in
# one batch (a turn every 32 split them: a first visit cost 1.2x the Python and 1.3x the round trips).
# The 2 ms bound of socket_turns still holds a flood's turn short.
READ_BURST = 256


class UdpTrackerClient:
    """Shared UDP tracker client of one worker process.

    ``announce_many``, ``scrape`` and ``connection_id`` block the calling greenlet
    only. Counters (``connects_sent``, ``announces_sent``, ``scrapes_sent``,
    ``dropped``) feed the benchmark and logs. ``on_sent``, when set, is told
    ``(address, kind)`` of every datagram the socket took (``note_sent``):
    what a visit costs the trackers (``crawler.sources.request_counts``).
    """

    def __init__(self, timeout: float = 4.0, retries: int = 2, bind4: str = "0.0.0.0", bind6: str = "::",
                 cache_size: int = 10_000):
        self.timeout = timeout
        self.retries = retries
        self._bind: dict[int, str] = {_stdsocket.AF_INET: bind4, _stdsocket.AF_INET6: bind6}
        self._socks: dict[int, socket.socket] = {}
        self._readers: list[gevent.Greenlet] = []
        # transaction id -> (address, expected action, waiter: an AsyncResult, or a batch's)
        self._pending: dict[int, tuple[tuple, int, AsyncResult]] = {}
        # tracker address -> (connection id, obtained at)
        self._conn: Lru[tuple, tuple[int, float]] = Lru(cache_size)
        self._connecting: dict[tuple, Event] = {}
        self.connects_sent = 0
        self.announces_sent = 0
        self.scrapes_sent = 0
        self.dropped = 0
        self.on_sent: Callable[[tuple, str], None] | None = None

    # --- sockets and routing ------------------------------------------------

    def socket_for(self, family: int) -> socket.socket:
        """The shared socket of ``family``, opened (and its reader started) on first use; raises OSError."""
        s = self._socks.get(family)
        if s is None:
            s = socket.socket(family, _stdsocket.SOCK_DGRAM)
            try:
                # Bursts of replies from many concurrent announces.
                s.setsockopt(_stdsocket.SOL_SOCKET, _stdsocket.SO_RCVBUF, 4 * 1024 * 1024)
            except OSError:
                pass
            s.bind((self._bind[family], 0))
            self._socks[family] = s
            self._readers.append(spawning.spawn(self._read, s))
        return s

    def _read(self, s: socket.socket) -> None:
        turns = Turns(s.fileno(), every=READ_BURST)
        while True:
            try:
                data, addr = s.recvfrom(65536)
            except OSError:
                if s.fileno() < 0:
                    return
                gevent.sleep(0.01)  # e.g. ICMP port unreachable surfacing as ECONNREFUSED
                continue
            self._take(data, addr)
            turns.took()

    def _take(self, data: bytes, addr: tuple) -> None:
        try:
            action, tid = codec.peek(data)
        except codec.UdpPacketError:
            self.dropped += 1
            return
        entry = self._pending.get(tid)
        if entry is None or entry[0] != addr[:2] or action not in (entry[1], codec.ERROR):
            self.dropped += 1
            return
        del self._pending[tid]
        entry[2].set(data)

    def close(self) -> None:
        """Close the sockets and stop the readers."""
        for s in self._socks.values():
            s.close()
        gevent.killall(self._readers, block=False)
        self._socks.clear()
        self._readers.clear()

    # --- one request -------------------------------------------------------

    def new_tid(self) -> int:
        """A transaction id no request is waiting on."""
        while True:
            tid = random.getrandbits(32)
            if tid not in self._pending:
                return tid

    def expect(self, tid: int, addr: tuple, action: int, waiter) -> None:
        """Have the reader hand ``waiter.set(datagram)`` the reply on ``tid`` from ``addr`` with ``action``
        (or the error action); until ``forget(tid)`` or the reply."""
        self._pending[tid] = (addr[:2], action, waiter)

    def note_sent(self, addr: tuple, kind: str) -> None:
        """A datagram of ``kind`` (connect, scrape, announce, withdrawal) went to ``addr``: tell ``on_sent``."""
        if self.on_sent is not None:
            self.on_sent(addr, kind)

    def forget(self, tid: int) -> None:
        """Stop waiting on ``tid`` (a reply that comes later is a stray)."""
        self._pending.pop(tid, None)

    def _request(self, addr: tuple, family: int, build, action: int, deadline: float) -> codec.Reply:
        """Send ``build(tid)`` up to ``retries`` times; return the parsed matching reply.

        For a connect or a scrape (a batch of announces is ``AnnounceBatch``'s).
        Raises TrackerTimeout, TrackerRefused (error action) or UdpPacketError.
        """
        try:
            s = self.socket_for(family)
        except OSError as e:  # e.g. no IPv6 on this host
            raise TrackerTimeout(f"cannot open a UDP socket for {addr[0]}: {e}") from e
        for _attempt in range(self.retries):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            tid = self.new_tid()
            waiter: AsyncResult[bytes] = AsyncResult()
            self.expect(tid, addr, action, waiter)
            try:
                s.sendto(build(tid), addr)
                self.note_sent(addr, KIND_OF[action])
                data = waiter.get(timeout=min(self.timeout, left))
            except gevent.Timeout:
                data = None  # no reply in time (the reader sets a waiter with its datagram)
            except OSError as e:
                raise TrackerTimeout(f"cannot send to {addr[0]}:{addr[1]}: {e}") from e
            finally:
                self.forget(tid)
            if data is None:  # (mypyc compiles no `continue` inside a `try` with a `finally`)
                continue
            reply = codec.parse_reply(data, family)
            if isinstance(reply, codec.ErrorReply):
                raise TrackerRefused(f"tracker error: {reply.message}")
            return reply
        what = codec.ACTION_NAMES[action]
        raise TrackerTimeout(f"no {what} reply from {addr[0]}:{addr[1]} after {self.retries} tries")

    def connection_id(self, addr: tuple, family: int, deadline: float) -> tuple[int, bool]:
        """A valid connection id for ``addr`` and whether it came from the cache."""
        while True:
            cached = self._conn.get(addr)
            if cached is not None and time.monotonic() - cached[1] < CONNECTION_TTL:
                return cached[0], True
            ev = self._connecting.get(addr)
            if ev is None:
                break
            left = deadline - time.monotonic()
            if left <= 0 or not ev.wait(timeout=left):
                raise TrackerTimeout(f"no connect reply from {addr[0]}:{addr[1]} in time")
            if addr not in self._conn:
                # The shared connect failed; try our own rather than fail blind.
                break
        mine = self._connecting[addr] = Event()  # a name of its own: `ev` above may be None
        try:
            self.connects_sent += 1
            reply = self._request(addr, family, codec.connect_request, codec.CONNECT, deadline)
            assert isinstance(reply, codec.ConnectReply)  # no other reply on its tid (an error is raised)
            self._conn[addr] = (reply.connection_id, time.monotonic())
            return reply.connection_id, False
        finally:
            # Several waiters of a failed shared connect may each have started
            # their own: only the latest one's entry is ours to remove.
            if self._connecting.get(addr) is mine:
                del self._connecting[addr]
            mine.set()

    def _with_connection(self, addr: tuple, family: int, build, action: int, deadline: float) -> codec.Reply:
        """Send ``build(connection_id, tid)`` on a valid connection id; the parsed reply.

        An error reply on a cached id drops the id and retries once with a
        fresh connect (the tracker may have restarted and forgotten it).
        """
        for attempt in range(2):
            cid, cached = self.connection_id(addr, family, deadline)
            try:
                return self._request(addr, family, functools.partial(build, cid), action, deadline)
            except TrackerRefused:
                if not cached or attempt:
                    raise
                self._conn.pop(addr, None)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def announce_many(
        self,
        addr: tuple,
        family: int,
        info_hashes: list[bytes],
        peer_id: bytes,
        port: int,
        num_want: int,
        deadline: float,
        event: int = codec.EVENT_STARTED,
        left: int = 1,
        key: int = 0,
        peers: bool = True,
        limit: int | None = None,
        withdraw: tuple[float, float] | None = None,
        on_done=None,
    ) -> list:
        """Announce each of ``info_hashes`` to the tracker at ``addr`` (a resolved sockaddr), all in
        flight at once, from this greenlet.

        Per hash, in order: its ``AnnounceReply`` (peers packed), or the tracker's fault as a
        value (``TrackerTimeout``, ``TrackerRefused``, ``UdpPacketError``).
        One greenlet waits for the whole batch (``AnnounceBatch``): each request is
        tried ``retries`` times of ``timeout`` seconds, never past
        ``deadline``. An error reply to a request sent on a cached connection
        id drops the id and sends that request again once on a fresh one (the
        tracker may have restarted and forgotten it).

        ``peers=False`` reads the counts only (the peer list is checked, not
        built). ``limit``: at most this many peer entries of a reply are
        decoded, the rest counted in the reply's ``cut``.

        ``withdraw=(seconds, until)``: each announce that answered is followed
        at once by its withdrawal (event stopped, counts only, one try of at
        most ``seconds``, never past ``until``). ``on_done(j, answer,
        withdrawn)`` is called as soon as hash ``j`` has its final answer
        (``withdrawn``: the withdrawal's (seeders, leechers), or None), so a
        caller hands each torrent on without waiting for the batch's slowest.
        """
        out: list = [None] * len(info_hashes)
        todo = list(range(len(info_hashes)))
        for attempt in range(2):
            try:
                cid, cached = self.connection_id(addr, family, deadline)
            except (TrackerTimeout, TrackerRefused, codec.UdpPacketError) as e:
                for i in todo:
                    out[i] = e
                    if on_done is not None:
                        on_done(i, e, None)
                return out

            def build(i: int, tid: int, stop: bool = False, cid=cid) -> bytes:
                self.announces_sent += 1
                return codec.announce_request(cid, tid, info_hashes[i], peer_id, port, num_want,
                                              codec.EVENT_STOPPED if stop else event, left=left, key=key)

            again = cached and not attempt  # a refusal is answered after one fresh connect

            def done(i: int, batch: AnnounceBatch, again=again) -> None:
                if on_done is not None and not (again and isinstance(out[i], TrackerRefused)):
                    on_done(i, out[i], batch.withdrawn.get(i))

            for i in todo:
                out[i] = None  # a request sent again answers afresh
            AnnounceBatch(self, addr, family, build, todo, deadline, peers, limit, withdraw, done).run(out)
            refused = [i for i in todo if isinstance(out[i], TrackerRefused)]
            if not again or not refused:
                break
            self._conn.pop(addr, None)
            todo = refused
        return out

    def scrape(self, addr: tuple, family: int, info_hashes: list[bytes], deadline: float) -> tuple[codec.ScrapeEntry, ...]:
        """Seeders, completed and leechers of the first of ``info_hashes`` (1 to 74), in their order, in one
        packet: as many entries as the tracker read (chihaya reads 50 a packet, aquatic 70; the rest
        are left out of its reply, not zeros).

        Uses the cached connection id like ``announce_many``. Raises
        TrackerTimeout, TrackerRefused, or UdpPacketError when the reply holds
        more entries than info-hashes asked; ValueError for a bad list (ours).
        """
        info_hashes = list(info_hashes)
        codec.scrape_request(0, 0, info_hashes)  # validate before any traffic

        def build(cid: int, tid: int) -> bytes:
            self.scrapes_sent += 1
            return codec.scrape_request(cid, tid, info_hashes)

        reply = self._with_connection(addr, family, build, codec.SCRAPE, deadline)
        assert isinstance(reply, codec.ScrapeReply)  # no other reply on its tid (an error is raised)
        if len(reply.entries) > len(info_hashes):
            raise codec.UdpPacketError(
                f"scrape reply has {len(reply.entries)} entries for {len(info_hashes)} info-hashes"
            )
        return reply.entries
