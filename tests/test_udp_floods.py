"""Every UDP socket a worker owns reads a flood in turns: the tracker client's, the DHT scrapes', libtorrent's.

A gevent socket's ``recvfrom`` returns at once while the kernel holds a
datagram, so a reader fed faster than it reads would never give the hub
back. The two readers in Python (``udp_client``, ``krpc_socket``) take
turns (``crawler/sources/socket_turns.py``): shown here on a backlog the
kernel queued while the hub was held, read while a witness greenlet notes
how far the reader got each time the witness runs. Without turns the reader
empties the whole backlog in one go; with them it reads at most
its own number of datagrams (``socket_turns.EVERY``, the tracker client's
``READ_BURST``) between two of the witness's turns. That is
an ordering, not a timing: it holds on a loaded machine.

libtorrent's DHT socket is read by libtorrent's own network thread, in C++:
a flood at its port costs that thread (and libtorrent's per-source rate
limit drops most of it) but never the hub, and a read-only node (BEP 43)
raises no alert for a query, so nothing reaches Python. The last test
floods it from a process of its own and checks the hub's longest turn, as
``tests/test_krpc_flood.py`` does for the scrape socket.
"""

from __future__ import annotations

import socket

import gevent
import pytest
from gevent import monkey

from crawler.settings import Settings
from crawler.sources import socket_turns
from crawler.sources.dht.dht_session import new_session
from crawler.sources.dht.krpc_socket import KrpcSocket
from crawler.sources.dht_alerts import AlertPump
from crawler.sources.trackers.udp_client import READ_BURST, UdpTrackerClient
from tests.test_krpc_flood import MOST_CPU_GAP, MOST_WALL_GAP, Ticker, flood

BACKLOG = 1000  # datagrams queued while the hub is held (the readers ask for 1-4 MB of buffer)


def tracker_reader():
    client = UdpTrackerClient(bind4="127.0.76.1")
    sock = client.socket_for(socket.AF_INET)
    return sock.getsockname(), lambda: client.dropped, client.close, READ_BURST


def scrape_reader():
    sock = KrpcSocket(bind=("127.0.76.2", 0))
    counted = lambda: sock.unsolicited + sock.malformed + sock.dropped + sock.received  # noqa: E731
    return sock.address, counted, sock.close, socket_turns.EVERY


@pytest.mark.parametrize("reader", [tracker_reader, scrape_reader], ids=["udp-tracker", "dht-scrape"])
def test_a_backlog_is_read_in_turns(reader):
    address, count, close, every = reader()
    plain = monkey.get_original("socket", "socket")(socket.AF_INET, socket.SOCK_DGRAM)
    plain.bind(("127.0.76.9", 0))
    try:
        gevent.sleep(0.05)  # the reader waits in recvfrom
        # the hub is held: this greenlet sends on a socket gevent does not patch, never yielding
        for _ in range(BACKLOG):
            plain.sendto(b"\0" * 8, address)
        seen: list[int] = []

        def witness() -> None:
            while True:
                seen.append(count())
                gevent.sleep(0)

        w = gevent.spawn(witness)
        last = -1
        while count() != last:  # until the backlog is read (nothing else comes)
            last = count()
            gevent.sleep(0.2)
        w.kill()
    finally:
        plain.close()
        close()
    steps = [b - a for a, b in zip(seen, seen[1:])]
    assert last >= 3 * every, last  # the kernel kept most of the backlog: several turns' worth
    assert max(steps) <= every, (max(steps), last)


def test_a_flood_at_libtorrents_dht_port_never_reaches_the_hub():
    session = new_session(Settings(allow_private=True), [], True, None, (("127.0.77.1", 0),))
    alerts: list = []
    pump = AlertPump(session, alerts.extend)
    port = session.listen_port()
    try:
        for datagram in ("query", "krpc"):
            ticker = Ticker()
            with flood("127.0.78.1", ("127.0.77.1", port), rate=0, datagram=datagram) as f:
                while ticker.ticks < 200:
                    gevent.sleep(0.05)
                flooding = f.running()
            ticker.stop()
            assert flooding and f.sent > 10_000, f.sent
            assert ticker.cpu < MOST_CPU_GAP and ticker.wall < MOST_WALL_GAP, (datagram, ticker.cpu, ticker.wall)
        assert alerts == []
    finally:
        pump.close()
        del session
