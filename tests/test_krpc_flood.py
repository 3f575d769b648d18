"""A flood at the DHT scrape socket (crawler/sources/dht/krpc_socket.py) freezes nothing and shuts no reply out.

The socket is open as long as a worker runs and every node it ever asked
knows its port. The flood comes from a process of its own
(``tests/udp_flood.py``) on another loopback address: 3,000 datagrams a
second of valid bencoded KRPC replies of ~4 KB listing 1,300 values, the
dearest datagram ``krpc_codec`` decodes whole (~2 ms of Python each, so
decoding them all would take 6 s a second).

How the hub's freedom is measured. A ticker greenlet sleeps 5 ms at a time;
between two of its wake-ups the hub ran whatever else was ready. The gap
asserted is the CPU time this thread spent between two wake-ups
(``time.thread_time``): it is what a greenlet that never yields takes from
the others, and it does not grow when the machine's other processes take
the CPU away from this one (a loaded 2-core machine can stall a process for
tens of milliseconds, which the wall clock would count). The wall gap is
asserted too, with a generous bound. A reader that decodes before it looks
at the sender spends the whole flood in one turn: 2 s of CPU or more.
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import gevent
import pytest
from gevent.server import DatagramServer

from crawler.bencode import codec as bencode
from crawler.sources.dht import krpc_codec as kc
from crawler.sources.dht.krpc_socket import MAX_STRIKES, KrpcSocket

ROOT = Path(__file__).resolve().parents[1]
IH = bytes(range(20))
MOST_CPU_GAP = 0.050  # the hub's longest turn taken by one greenlet
MOST_WALL_GAP = 1.0  # generous: the machine may stall the process; the flood lasts 2.5 s


class Flood:
    """A flood from ``source`` to ``target`` (``tests/udp_flood.py``), from ``start()`` to ``stop()``."""

    def __init__(self, source: str, target: tuple, rate: float, datagram: str = "krpc", most: float = 12.0):
        self.args = [sys.executable, "-m", "tests.udp_flood", source, target[0], str(target[1]), str(rate),
                     "--datagram", datagram, "--most", str(most)]
        self.sent = 0

    def start(self) -> None:
        """Returns once the first burst is out."""
        self.p = subprocess.Popen(self.args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.p.stdout.readline() == b"flooding\n"

    def running(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> None:
        self.p.stdin.close()
        self.sent = int(self.p.stdout.read() or 0)
        self.p.wait(10)


@contextmanager
def flood(source: str, target: tuple, rate: float, datagram: str = "krpc", most: float = 12.0):
    """A ``Flood`` running while the block runs."""
    f = Flood(source, target, rate, datagram, most)
    f.start()
    try:
        yield f
    finally:
        f.stop()


class Ticker:
    """A greenlet that wakes every 5 ms and keeps the longest gaps between its wake-ups (CPU and wall)."""

    def __init__(self):
        self.cpu = self.wall = 0.0
        self.ticks = 0
        self._g = gevent.spawn(self._run)

    def _run(self) -> None:
        wall, cpu = time.monotonic(), time.thread_time()
        while True:
            gevent.sleep(0.005)
            now_wall, now_cpu = time.monotonic(), time.thread_time()
            self.wall = max(self.wall, now_wall - wall)
            self.cpu = max(self.cpu, now_cpu - cpu)
            self.ticks += 1
            wall, cpu = now_wall, now_cpu

    def stop(self) -> None:
        self._g.kill()


class Responder(DatagramServer):
    """A KRPC node that answers every query (``get_peers``) with its id and a token."""

    def __init__(self, ip: str):
        super().__init__((ip, 0))
        self.asked = 0

    def handle(self, data, address):
        self.asked += 1
        tid = bencode.decode(data)[b"t"]
        self.socket.sendto(kc.response(kc.Response(tid, bytes(19) + b"\x01", token=b"tok")), address)


class Garbler(DatagramServer):
    """A KRPC node that answers a query with ``count`` datagrams: malformed, or replies on other ids.

    With ``count`` 0 it answers as an honest node does.
    """

    def __init__(self, ip: str, count: int, malformed: bool):
        super().__init__((ip, 0))
        self.count, self.malformed = count, malformed

    def handle(self, data, address):
        if not self.count:  # turned honest
            tid = bencode.decode(data)[b"t"]
            self.socket.sendto(kc.response(kc.Response(tid, bytes(20))), address)
        if self.malformed:
            junk = b"d1:t4:abcd1:y1:re" + b"x" * 3000  # bencode, then trailing bytes
        else:
            junk = kc.response(kc.Response(b"nope", bytes(20)))
        for _ in range(self.count):
            self.socket.sendto(junk, address)


def ask(sock: KrpcSocket, address: tuple, timeout: float):
    return sock.ask(address, lambda t: kc.get_peers(t, sock.node_id, IH), time.monotonic(), timeout)


def test_a_flood_from_an_address_nobody_asked_is_dropped_unread():
    responder = Responder("127.0.71.1")
    responder.start()
    with KrpcSocket(bind=("127.0.70.1", 0)) as sock:
        ticker = Ticker()  # before the flood: a reader that never yields would keep it from starting
        try:
            with flood("127.0.72.1", sock.address, rate=3000) as f:
                answered = []
                # five honest exchanges during the flood (each tried up to three times: a
                # stalled process may let the kernel's buffer overflow and lose a reply)
                for _ in range(5):
                    for _try in range(3):
                        reply = ask(sock, responder.address, 1.0)
                        if reply is not None:
                            answered.append((reply, f.running()))
                            break
                    gevent.sleep(0.2)
                while ticker.ticks < 200:  # a second of the flood at least
                    gevent.sleep(0.05)
                ticker.stop()
                flooding = f.running()
        finally:
            responder.stop()
    assert ticker.cpu < MOST_CPU_GAP, (ticker.cpu, ticker.wall)
    assert ticker.wall < MOST_WALL_GAP, (ticker.cpu, ticker.wall)
    # answered while the flood went on (it stops once we close its stdin)
    assert len(answered) == 5 and flooding
    assert all(isinstance(r, kc.Response) and r.token == b"tok" and during for r, during in answered)
    # every flood datagram that reached the reader was dropped unread
    assert f.sent >= sock.unsolicited >= 1000 and sock.malformed == sock.dropped == 0
    assert sock.turns.given > 0


@pytest.mark.parametrize("malformed", [True, False], ids=["malformed", "other-ids"])
def test_an_asked_node_that_floods_is_given_up_after_a_few_datagrams(malformed):
    garbler = Garbler("127.0.73.1", 200, malformed)
    garbler.start()
    responder = Responder("127.0.73.2")
    responder.start()
    try:
        with KrpcSocket(bind=("127.0.70.2", 0)) as sock:
            honest = gevent.spawn(ask, sock, responder.address, 5.0)
            # a second query to the garbler, waiting for its place (0.3 s on)
            later = gevent.spawn(sock.ask, garbler.address, lambda t: kc.get_peers(t, sock.node_id, IH),
                                 time.monotonic() + 0.3, 30.0)
            gevent.sleep(0)
            got = ask(sock, garbler.address, 30.0)
            # given up: the query ends at once, without waiting out its 30 s, and so does the
            # one waiting for its place, which is never sent
            assert got is None and sock.given_up == 1
            assert later.get() is None and sock.sent == 2  # the honest query and the first
            assert sock.malformed + sock.dropped == MAX_STRIKES
            assert (sock.malformed if malformed else sock.dropped) == MAX_STRIKES
            assert isinstance(honest.get(), kc.Response)
            # what arrives after is not decoded (the kernel may lose some of the burst: half is
            # enough); nothing is kept for an address nobody waits on
            while sock.unsolicited < 100:
                gevent.sleep(0.01)
            assert sock.malformed + sock.dropped == MAX_STRIKES and sock.awaiting() == 0
            # a later query starts afresh
            garbler.count = 0
            assert isinstance(ask(sock, garbler.address, 5.0), kc.Response) and sock.given_up == 1
            assert isinstance(ask(sock, responder.address, 5.0), kc.Response)
    finally:
        garbler.stop()
        responder.stop()
