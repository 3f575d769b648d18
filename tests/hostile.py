"""Misbehaving UDP and HTTP trackers for tests, run as greenlets on loopback.

Each tracker's behaviour is chosen per info-hash (the hash's first byte picks
a mode), so one tracker serves good and bad torrents side by side and the
tests can show that bad ones do not hurt the others.
"""

from __future__ import annotations

import functools
import random
import socket as _stdsocket
import struct
import urllib.parse

import gevent
import pytest
from gevent import socket
from gevent.server import StreamServer

from crawler.bencode import codec as bencode
from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.peers import encode_compact

GOOD_PEERS = (("127.9.0.1", 1111), ("127.9.0.2", 2222))

# UDP modes, by the info-hash's first byte.
UDP_GOOD, UDP_TRUNCATED, UDP_WRONG_TID, UDP_ERROR, UDP_ODD_PEERS, UDP_SILENT, UDP_WRONG_ACTION, UDP_SPOOF = range(8)
# A reply filling a whole datagram with distinct peers (10,914 IPv4 entries).
UDP_FLOOD = 8
FLOOD_DATAGRAM_ENTRIES = (65507 - 20) // 6


def fake_peers(n: int, port: int = 6881) -> bytes:
    """``n`` distinct compact IPv4 entries (1.0.0.0 upward, all on ``port``), built fast."""
    return b"".join(struct.pack(">IH", 0x01000000 + i, port) for i in range(n))


# The most distinct entries a 2 MiB HTTP reply holds (2 MiB over 6 bytes, less the bencoding).
HTTP_FLOOD_ENTRIES = 349_504


@functools.cache
def flood_body() -> bytes:
    """A 2 MiB announce reply of ``HTTP_FLOOD_ENTRIES`` distinct peers (built once per test process)."""
    return bencode.encode({b"interval": 900, b"complete": 1, b"incomplete": 400_000,
                           b"peers": fake_peers(HTTP_FLOOD_ENTRIES)})


# Each hostile mode of HostileUdpTracker and the failure it must give.
UDP_CASES = [
    (UDP_TRUNCATED, "UdpPacketError: announce reply of 13 bytes"),
    (UDP_WRONG_TID, "TrackerTimeout: no announce reply"),
    (UDP_ERROR, "tracker error: go away"),
    (UDP_ODD_PEERS, "not a multiple of 6"),
    (UDP_SILENT, "TrackerTimeout: no announce reply"),
    (UDP_WRONG_ACTION, "TrackerTimeout: no announce reply"),
    (UDP_SPOOF, "TrackerTimeout: no announce reply"),
]


class HostileUdpTracker:
    """A UDP tracker on 127.0.0.1 whose reply to an announce depends on the hash's first byte."""

    def __init__(self):
        self.sock = socket.socket(_stdsocket.AF_INET, _stdsocket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.spoof = socket.socket(_stdsocket.AF_INET, _stdsocket.SOCK_DGRAM)
        self.spoof.bind(("127.0.0.1", 0))
        self.connects = 0
        self.g = gevent.spawn(self._serve)

    @property
    def url(self) -> str:
        return f"udp://127.0.0.1:{self.port}/announce"

    def _serve(self):
        while True:
            data, addr = self.sock.recvfrom(2048)
            if len(data) == 16:
                self.connects += 1
                _, _, tid = struct.unpack(">QII", data)
                self.sock.sendto(u.encode_reply(u.ConnectReply(tid, 0xABCDEF)), addr)
                continue
            if len(data) >= 16 and struct.unpack_from(">I", data, 8)[0] == u.SCRAPE:
                self._scrape(data, addr)
                continue
            req = u.AnnounceRequest.decode(data)
            mode = req.info_hash[0]
            tid = req.transaction_id
            good = u.encode_reply(u.AnnounceReply(tid, 900, 3, 1, GOOD_PEERS))
            if mode == UDP_GOOD or req.event == u.EVENT_STOPPED:
                self.sock.sendto(good, addr)
            elif mode == UDP_TRUNCATED:
                self.sock.sendto(good[:13], addr)
            elif mode == UDP_WRONG_TID:
                self.sock.sendto(u.encode_reply(u.AnnounceReply(tid ^ 1, 900, 3, 1, GOOD_PEERS)), addr)
            elif mode == UDP_ERROR:
                self.sock.sendto(u.encode_reply(u.ErrorReply(tid, "go away")), addr)
            elif mode == UDP_ODD_PEERS:
                self.sock.sendto(good + b"\x01\x02\x03", addr)
            elif mode == UDP_WRONG_ACTION:
                self.sock.sendto(u.encode_reply(u.ScrapeReply(tid, (u.ScrapeEntry(1, 2, 3),))), addr)
            elif mode == UDP_FLOOD:
                head = struct.pack(">IIIII", u.ANNOUNCE, tid, 900, 20000, 1)
                self.sock.sendto(head + fake_peers(FLOOD_DATAGRAM_ENTRIES), addr)
            elif mode == UDP_SPOOF:
                # Right transaction id, wrong source port: must be ignored.
                self.spoof.sendto(u.encode_reply(u.AnnounceReply(tid, 900, 9, 9, (("6.6.6.6", 666),))), addr)
            # UDP_SILENT: never answer.

    def _scrape(self, data: bytes, addr) -> None:
        # One entry (n, 2n, 3n) per hash n = 1, 2, ...; a first hash of mode
        # UDP_TRUNCATED gets one entry fewer than it asked for.
        tid = struct.unpack_from(">I", data, 12)[0]
        hashes = [data[o:o + 20] for o in range(16, len(data), 20)]
        n = len(hashes) - (1 if hashes and hashes[0][0] == UDP_TRUNCATED else 0)
        entries = tuple(u.ScrapeEntry(i, 2 * i, 3 * i) for i in range(1, n + 1))
        self.sock.sendto(u.encode_reply(u.ScrapeReply(tid, entries)), addr)

    def close(self):
        self.g.kill()
        self.sock.close()
        self.spoof.close()


def _good() -> dict:
    return {b"interval": 900, b"min interval": 60, b"complete": 1, b"incomplete": 3,
            b"peers": encode_compact(GOOD_PEERS), b"peers6": encode_compact([("::1", 3333)], _stdsocket.AF_INET6),
            b"warning message": b"be nice"}


class _Reply:
    """One HTTP reply on ``sock``: ``send`` a whole one, or ``raw`` bytes as they are."""

    def __init__(self, sock):
        self.raw = sock.sendall

    def send(self, body: bytes, status="200 OK", extra=""):
        self.raw(f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body)


def _chunked(r: _Reply, _p) -> None:
    body = bencode.encode(_good())
    half = len(body) // 2
    r.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:]))


def _dictpeers(r: _Reply, _p) -> None:
    d = {**_good(), b"peers": [{b"ip": b"127.9.0.5", b"port": 5555, b"peer id": b"x" * 20}]}
    del d[b"peers6"]
    r.send(bencode.encode(d))


def _huge(r: _Reply, _p) -> None:
    r.raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
    for _ in range(2000):
        r.raw(b"x" * 65536)


def _endless(chunk: int):
    def serve(r: _Reply, _p) -> None:
        r.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(100000):
            r.raw(b"%x\r\n" % chunk + b"y" * chunk + b"\r\n")
    return serve


def _slow(r: _Reply, _p) -> None:
    gevent.sleep(30)
    r.send(bencode.encode(_good()))


def _drip(r: _Reply, _p) -> None:
    r.raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(1000):
        gevent.sleep(0.1)
        r.raw(b"d")


def _untilclose(r: _Reply, _p) -> None:
    # HTTP/1.0 without Content-Length: the body ends when the connection does.
    body = bencode.encode(_good())
    r.raw(b"HTTP/1.0 200 OK\r\n\r\n" + body[:10])
    gevent.sleep(0.05)
    r.raw(body[10:])


def _hexchunk(r: _Reply, _p) -> None:
    body = bencode.encode(_good())
    r.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"0x%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))


def _refuse(r: _Reply, p: dict) -> None:
    key = p.get("passkey", ["?"])[0]
    r.send(bencode.encode({b"failure reason": f"passkey {key} is not registered here".encode()}))


def _not_found(r: _Reply, _p) -> None:
    r.send(b"", "404 Not Found")


# HostileHttpTracker's paths: each answers (reply, query parameters).
HTTP_ROUTES = {
    "/good": lambda r, p: r.send(bencode.encode(_good())),
    "/chunked": _chunked,
    "/dictpeers": _dictpeers,
    "/flood": lambda r, p: r.send(flood_body()),
    "/refuse": _refuse,
    "/hugeinterval": lambda r, p: r.send(bencode.encode({**_good(), b"interval": 10**400})),
    "/failure": lambda r, p: r.send(bencode.encode({b"failure reason": b"unregistered torrent"})),
    "/odd": lambda r, p: r.send(bencode.encode({**_good(), b"peers": b"\x01" * 7})),
    "/garbage": lambda r, p: r.send(b"<html>hello</html>"),
    "/huge": _huge,
    "/endless": _endless(16),
    "/endlesswide": _endless(4096),
    "/slow": _slow,
    "/drip": _drip,
    # "²" in Latin-1, as a header is read: str.isdigit() says yes, int() says no.
    "/superscript": lambda r, p: r.raw("HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\n".encode("latin-1")
                                       + bencode.encode(_good())),
    "/untilclose": _untilclose,
    "/twolengths": lambda r, p: r.raw(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef"),
    "/hexchunk": _hexchunk,
    "/bigint": lambda r, p: r.send(bencode.encode(_good()).replace(b"i900e", b"i" + b"9" * 5000 + b"e")),
    "/farinterval": lambda r, p: r.send(bencode.encode({**_good(), b"interval": 2**40, b"min interval": 2**40})),
    "/bigcount": lambda r, p: r.send(bencode.encode({**_good(), b"complete": 2**40})),
    "/redirect": lambda r, p: r.send(b"", "302 Found", f"Location: {p['to'][0]}\r\n"),
    "/loop": lambda r, p: r.send(b"", "302 Found", "Location: /loop\r\n"),
}


class HostileHttpTracker:
    """An HTTP tracker on 127.0.0.1; the path picks the misbehaviour.

    /good, /failure, /dictpeers, /odd, /huge (Content-Length, too big),
    /endless (chunked, never ends), /slow (answers after 30 s),
    /redirect?to=<url>, /loop (redirects to itself), /garbage; hostile bytes:
    /superscript (``Content-Length: ²``), /hexchunk (chunk size ``0x..``),
    /bigint (a 5,000-digit interval), /farinterval (interval 2^40, counts
    fine), /bigcount (``complete`` of 2^40), /hugeinterval (an interval no
    float holds); floods and refusals: /flood (349,504 distinct peers in
    2 MiB), /refuse?passkey=K (a failure reason quoting the passkey).
    ``tls``: a server-side gevent SSLContext (``tests.tls_trackers``) to
    serve the same over https.
    """

    def __init__(self, tls=None):
        self.server = StreamServer(("127.0.0.1", 0), self._handle, **({"ssl_context": tls} if tls else {}))
        self.server.start()
        self.port = self.server.server_port
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"

    def _handle(self, sock, addr):
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk:
                return
            buf += chunk
        target = buf.split(b" ", 2)[1].decode()
        self.last_target = target
        host = [v for k, _, v in (line.partition(b": ") for line in buf.split(b"\r\n")) if k.lower() == b"host"]
        self.last_host = host[0].decode() if host else None
        path, _, query = target.partition("?")
        try:
            HTTP_ROUTES.get(path, _not_found)(_Reply(sock), urllib.parse.parse_qs(query))
        except OSError:
            pass
        finally:
            sock.close()

    def close(self):
        self.server.stop(timeout=0.1)


class LoopbackUdpTracker:
    """A scripted UDP tracker on a loopback port: it answers every connect with ``cid``, hands
    each announce to ``answer(request, addr)`` and each scrape to ``scrape(transaction id,
    info-hashes, addr)`` (a reply, or None for silence; scrapes are silent unless scripted)."""

    cid = 77

    def __init__(self):
        self.sock = socket.socket(_stdsocket.AF_INET, _stdsocket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.g = gevent.spawn(self._serve)

    @property
    def url(self) -> str:
        return f"udp://127.0.0.1:{self.port}/announce"

    def _serve(self):
        while True:
            data, addr = self.sock.recvfrom(2048)
            if len(data) == 16:
                tid = struct.unpack(">QII", data)[2]
                self.sock.sendto(u.encode_reply(u.ConnectReply(tid, self.cid)), addr)
                continue
            action, tid = struct.unpack_from(">II", data, 8)
            if action == u.SCRAPE:
                hashes = [data[i:i + 20] for i in range(16, len(data) - 19, 20)]
                reply = self.scrape(tid, hashes, addr)
            else:
                reply = self.answer(u.AnnounceRequest.decode(data), addr)
            if reply is not None:
                self.sock.sendto(u.encode_reply(reply), addr)

    def answer(self, req, addr):
        raise NotImplementedError

    def scrape(self, tid, hashes, addr):
        return None

    def close(self):
        self.g.kill()
        self.sock.close()


class LossyTracker(LoopbackUdpTracker):
    """A UDP tracker that ignores the first try of every announce and answers the second."""

    def __init__(self):
        self.seen: set[bytes] = set()
        self.announces = 0
        super().__init__()

    def answer(self, req, addr):
        self.announces += 1
        key = req.info_hash + bytes([req.event])
        if key not in self.seen:
            self.seen.add(key)
            return None
        return u.AnnounceReply(req.transaction_id, 900, 2, 5, GOOD_PEERS)


class ListingUdpTracker(LoopbackUdpTracker):
    """A UDP tracker that behaves as widely used implementations do: it registers
    the requester in the swarm before it picks the reply (so the requester may
    be listed, and is counted), and clamps numwant to its own ``clamp``
    (None: no clamp). Every torrent has ``swarm`` leechers of its own
    (public-looking addresses) besides whoever announces.
    """

    cid = 0x1234

    def __init__(self, swarm: int, clamp: int | None = None):
        self.swarm, self.clamp = swarm, clamp
        self.wanted: list[int] = []  # numwant of every started announce
        self._peers: dict[bytes, list] = {}
        self._joined: dict[bytes, set] = {}
        super().__init__()

    def answer(self, req, addr):
        own = self._peers.setdefault(req.info_hash, [
            (f"{1 + i // 65536}.{(i // 256) % 256}.{i % 256}.7", 6881) for i in range(self.swarm)])
        joined = self._joined.setdefault(req.info_hash, set())
        me = (addr[0], req.port)
        if req.event == u.EVENT_STOPPED:
            joined.discard(me)
            picks = ()
        else:
            self.wanted.append(req.num_want)
            joined.add(me)  # registered before the pick, as the real ones do
            n = req.num_want if self.clamp is None else min(req.num_want, self.clamp)
            everyone = own + sorted(joined)
            picks = tuple(random.sample(everyone, min(n, len(everyone))))
            if me not in picks and len(everyone) > n:
                picks = (me,) + picks[1:]  # this implementation lists the requester first
        return u.AnnounceReply(req.transaction_id, 1800, len(own) + len(joined), 0, picks)


@pytest.fixture
def http_tracker():
    """A hostile HTTP tracker stand-in for one test."""
    t = HostileHttpTracker()
    yield t
    t.close()


@pytest.fixture
def udp_tracker():
    """A hostile UDP tracker stand-in for one test."""
    t = HostileUdpTracker()
    yield t
    t.close()
