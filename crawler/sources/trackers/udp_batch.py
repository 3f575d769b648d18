"""One batch of UDP tracker announces to one address, driven by one greenlet.

``UdpTrackerClient.announce_many`` hands a batch its requests; the batch
sends them all at once on the client's socket, each on a transaction id of
its own, and its greenlet sleeps until the client's reader hands over a
datagram or the earliest try expires. An announce reply may be cut to the
caller's ``limit`` entries before its peers are decoded (``_cut``): a
datagram holds up to ~10,900 IPv4 entries, and decoding what is then
dropped would only cost time.
"""

from __future__ import annotations

import socket as _stdsocket
import time

from gevent.event import Event

from crawler.sources.trackers import udp_codec as codec
from crawler.sources.trackers.tracker_errors import TrackerRefused, TrackerTimeout


def _cut(data: bytes, family: int, limit: int) -> tuple[bytes, int]:
    """An announce reply datagram cut to ``limit`` peer entries, and how many were cut.

    Anything else (another action, a short packet, a list that is not whole
    entries) is returned whole for ``parse_reply`` to judge.
    """
    size = 6 if family == _stdsocket.AF_INET else 18
    body = len(data) - 20
    if len(data) < 8 or codec.peek(data)[0] != codec.ANNOUNCE or body < 0 or body % size:
        return data, 0
    entries = body // size
    if entries <= limit:
        return data, 0
    return data[: 20 + max(0, limit) * size], entries - max(0, limit)


class _Arrival:
    """Where the reader hands one batched request's datagram (the waiter ``expect`` registers for it)."""

    __slots__ = ("batch", "tid")

    def __init__(self, batch: AnnounceBatch, tid: int):
        self.batch, self.tid = batch, tid

    def set(self, data: bytes) -> None:
        self.batch.arrived.append((self.tid, data))
        self.batch.event.set()


class AnnounceBatch:
    """Announces of one batch to one address, driven by the greenlet that calls ``run``.

    ``client``: the ``UdpTrackerClient`` whose socket, transaction ids and
    tries (``timeout``, ``retries``) the batch uses. Each request gets its own
    transaction id, registered with the client (``expect``: the reader checks
    address and action as for any request), but they share one wake-up: the
    batch's greenlet sleeps until a datagram arrives or the earliest try
    expires, then sends again what expired (up to ``retries`` tries). ``run(out)`` fills ``out[i]`` for each ``i`` of
    ``todo`` with the parsed reply (and entries cut, as a ``cut`` of the
    reply) or the exception. With ``withdraw=(seconds, until)`` an answered
    announce is followed by its withdrawal (one try; its counts land in
    ``withdrawn[i]``); ``on_done(i, batch)`` is called once per request, as
    soon as its answer (and withdrawal) is final.
    """

    def __init__(self, client, addr: tuple, family: int, build, todo: list[int],
                 deadline: float, peers: bool, limit: int | None, withdraw: tuple[float, float] | None = None,
                 on_done=None):
        self.client, self.addr, self.family, self.build = client, addr, family, build
        self.todo, self.deadline, self.peers, self.limit = todo, deadline, peers, limit
        self.withdraw, self.on_done = withdraw, on_done
        self.withdrawn: dict[int, tuple] = {}  # request index -> its withdrawal's (seeders, leechers)
        self.arrived: list[tuple[int, bytes]] = []
        self.event = Event()

    def run(self, out: list) -> None:
        """Send every request, then wait, collect and send again until each has its answer in ``out``."""
        try:
            self.sock = self.client.socket_for(self.family)
        except OSError as e:
            for i in self.todo:
                out[i] = TrackerTimeout(f"cannot open a UDP socket for {self.addr[0]}: {e}")
                self._done(i)
            return
        self.owner: dict[int, int] = {}  # transaction id -> request index
        self.stop_owner: dict[int, int] = {}  # a withdrawal's transaction id -> request index
        self.expiry: dict[int, float] = {}  # request index -> when its try (or withdrawal) expires
        self.stopping: set[int] = set()  # request indexes whose withdrawal is under way
        self.tries = dict.fromkeys(self.todo, 0)
        try:
            for i in self.todo:
                if time.monotonic() >= self.deadline:
                    break
                self._send(i, out)
            while self.expiry:
                self.event.clear()
                if not self.arrived:
                    self.event.wait(max(0.0, min(self.expiry.values()) - time.monotonic()))
                self._collect(out)
                self._expire(out)
            for i in self.todo:
                if out[i] is None:
                    out[i] = TrackerTimeout(f"no announce reply from {self.addr[0]}:{self.addr[1]} in time")
                    self._done(i)
        finally:
            for tid in (*self.owner, *self.stop_owner):
                self.client.forget(tid)

    def _done(self, i: int) -> None:
        if self.on_done is not None:
            self.on_done(i, self)

    def _send(self, i: int, out: list, stop: bool = False) -> None:
        """Send request ``i`` (again), or its withdrawal, on a new transaction id; a send error
        is the request's answer (a withdrawal's only ends it)."""
        c = self.client
        tid = c.new_tid()
        c.expect(tid, self.addr, codec.ANNOUNCE, _Arrival(self, tid))
        if stop:
            assert self.withdraw is not None  # a withdrawal is sent only for a batch told to withdraw
            self.stop_owner[tid] = i
            self.stopping.add(i)
            self.expiry[i] = min(time.monotonic() + self.withdraw[0], self.withdraw[1])
        else:
            self.owner[tid] = i
            self.tries[i] += 1
            self.expiry[i] = min(time.monotonic() + c.timeout, self.deadline)
        try:
            self.sock.sendto(self.build(i, tid, stop), self.addr)
        except OSError as e:
            del self.expiry[i]
            if not stop:
                out[i] = TrackerTimeout(f"cannot send to {self.addr[0]}:{self.addr[1]}: {e}")
            self.stopping.discard(i)
            self._done(i)
        else:
            c.note_sent(self.addr, "withdrawal" if stop else "announce")

    def _collect(self, out: list) -> None:
        """Parse the datagrams the reader handed over into their requests' answers."""
        arrived, self.arrived = self.arrived, []
        for tid, data in arrived:
            self.client.forget(tid)
            i = self.stop_owner.pop(tid, None)
            if i is not None:
                if i in self.stopping:
                    self.stopping.discard(i)
                    del self.expiry[i]
                    r = self._parse(data, False)
                    if isinstance(r, codec.AnnounceReply):
                        self.withdrawn[i] = (r.seeders, r.leechers)
                    self._done(i)
                continue
            i = self.owner.pop(tid, None)
            if i is None or i not in self.expiry or i in self.stopping:
                continue  # a late reply to an earlier try of an answered request
            del self.expiry[i]
            out[i] = self._parse(data, self.peers)
            if self.withdraw is not None and not isinstance(out[i], Exception) \
                    and time.monotonic() < self.withdraw[1]:
                self._send(i, out, stop=True)
            else:
                self._done(i)

    def _expire(self, out: list) -> None:
        """Send again each request whose try expired, or give it its timeout once out of tries or
        time; an expired withdrawal just ends (best effort)."""
        now = time.monotonic()
        for i in [i for i, t in self.expiry.items() if t <= now]:
            del self.expiry[i]
            if i in self.stopping:
                self.stopping.discard(i)
                self._done(i)
            elif self.tries[i] < self.client.retries and now < self.deadline:
                self._send(i, out)
            else:
                out[i] = TrackerTimeout(f"no announce reply from {self.addr[0]}:{self.addr[1]} after "
                                        f"{self.tries[i]} tries")
                self._done(i)

    def _parse(self, data: bytes, peers: bool):
        """One datagram as the client's single requests parse it: the reply (its ``cut`` set, its peers
        packed: ``crawler.sources.compact_peers``), or the exception."""
        try:
            data, cut = _cut(data, self.family, self.limit) if peers and self.limit is not None else (data, 0)
            reply = codec.parse_reply(data, self.family, peers, packed=True)
        except codec.UdpPacketError as e:
            return e
        if isinstance(reply, codec.ErrorReply):
            return TrackerRefused(f"tracker error: {reply.message}")
        if cut:
            assert isinstance(reply, codec.AnnounceReply)  # _cut cuts announce replies alone
            return reply._replace(cut=cut)
        return reply
