"""Scrape first (crawler/sources/trackers/tracker_scrapes.py) against a real opentracker, UDP and HTTP,
and against trackers that cannot scrape or drop scrapes."""

from __future__ import annotations

import os
import socket
import threading
import time

import gevent
import pytest

from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.health_report import tracker_report
from crawler.sources.trackers.tracker_scrapes import EMPTY, RELEARN_SECONDS, SILENT_LIMIT
from crawler.sources.trackers.trackers import Trackers
from tests.cap_places import Places, gaps
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)


def _hashes(n):
    return [os.urandom(20).hex() for _ in range(n)]


@pytest.fixture
def trackers(settings, client, keys):
    t = Trackers(settings.replace(udp_timeout=0.5, udp_retries=1, http_timeout=2.0), client, keys)
    # the packet counts below assume visits that join a group before it closes: on a loaded
    # machine a greenlet can be late by more than the 2 ms pause that closes one, and 75 of
    # them (each reading tracker health first) can take longer than the 20 ms a group forms at
    # most; these leave a stall of a fifth of a second, and five seconds for all of them
    t.scrapes.groups.quiet, t.scrapes.groups.window = 0.2, 5.0
    yield t
    t.close()


def _all(trackers, url, hashes):
    jobs = [gevent.spawn(trackers.announce, url, h) for h in hashes]
    gevent.joinall(jobs, raise_error=True)
    return [j.value for j in jobs]


def test_75_empty_swarms_take_two_udp_scrape_packets_and_no_announce(opentracker, trackers):  # noqa: F811
    hashes = _hashes(75)
    ot = opentracker(hashes)
    results = _all(trackers, ot.udp_url, hashes)
    assert all(r.ok and r.peers == frozenset() and (r.seeders, r.leechers) == (0, 0) for r in results)
    assert {r.asked for r in results} == {"scrape"}
    # 74 + 1 hashes: two packets, on one connection id; nothing announced, nothing withdrawn
    assert (trackers.udp.scrapes_sent, trackers.udp.connects_sent, trackers.udp.announces_sent) == (2, 1, 0)


def test_65_swarms_take_two_http_scrapes_and_only_the_live_one_is_announced(opentracker, trackers):  # noqa: F811
    hashes, (first, last) = _hashes(65), _hashes(2)
    ot = opentracker(hashes + [first, last])
    live = hashes[3]
    ot.announce_from(peer_address(1), live, 21001, left=0)
    ot.announce_from(peer_address(2), live, 21002)
    ot.announce_from(peer_address(3), first, 21003)
    ot.announce_from(peer_address(4), last, 21004)
    # A torrent left out is read as empty only as deep in a request as the tracker was seen to
    # read (a reply listing two torrents asked, the deepest there). Seats taken by one greenlet
    # are asked in their order: two live swarms at both ends of a full request show all 64 read.
    seats = [trackers.scrapes.seat(ot.http_url, bytes.fromhex(h), 5.0) for h in [first, *_hashes(62), last]]
    answers = [trackers.scrapes.answer(ot.http_url, seat) for seat in seats]
    assert answers[0].leechers == answers[-1].leechers == 1 and answers[1:-1] == [EMPTY] * 62
    assert trackers.scrapes.reads.get(ot.http_url) == 64
    before = trackers.scrapes.http_requests
    results = dict(zip(hashes, _all(trackers, ot.http_url, hashes)))
    assert trackers.scrapes.http_requests - before == 2
    r = results.pop(live)
    assert r.ok and r.asked == "announce" and set(r.peers) == {(peer_address(1), 21001), (peer_address(2), 21002)}
    assert all(r.ok and r.asked == "scrape" and r.peers == frozenset() for r in results.values())


@pytest.mark.parametrize("scheme", ["udp", "http"])
def test_a_swarm_scraped_empty_is_announced_once_it_has_peers(opentracker, trackers, scheme):  # noqa: F811
    ih, other = _hashes(2)
    ot = opentracker([ih, other])
    url = ot.udp_url if scheme == "udp" else ot.http_url
    first = trackers.announce(url, ih)
    assert first.ok and first.asked == "scrape" and first.peers == frozenset()
    ot.announce_from(peer_address(7), ih, 22007)
    again = trackers.announce(url, ih)
    assert again.ok and again.asked == "announce" and set(again.peers) == {(peer_address(7), 22007)}
    assert (again.seeders, again.leechers) == (0, 1)


def test_a_torrent_on_two_trackers_empty_on_one_is_announced_only_to_the_other(opentracker, trackers):  # noqa: F811
    (ih,) = _hashes(1)
    empty, busy = opentracker([ih]), opentracker([ih])
    busy.announce_from(peer_address(3), ih, 23003, left=0)
    before = empty.udp_announces(), busy.udp_announces()  # the fixture's own probes and the peer's
    a, b = trackers.announce(empty.udp_url, ih), trackers.announce(busy.udp_url, ih)
    assert (a.asked, b.asked) == ("scrape", "announce")
    # the announce and its withdrawal went to the busy tracker only
    assert (empty.udp_announces() - before[0], busy.udp_announces() - before[1]) == (0, 2)
    assert set(b.peers) == {(peer_address(3), 23003)}


def test_an_http_tracker_without_a_scrape_url_is_announced_to(opentracker, trackers):  # noqa: F811
    (ih,) = _hashes(1)
    ot = opentracker([ih])
    # BEP 48: a last path part that does not begin with "announce" has no scrape form
    url = ot.http_url.replace("/announce", "/announce/") + "?x=1"
    r = trackers.announce(url, ih)
    assert r.ok and r.asked == "announce" and trackers.scrapes.http_requests == 0


class _Udp:
    """A UDP tracker that answers connects and announces, and scrapes with ``on_scrape``:
    "error" (an error reply), "silent", or "empty" (every swarm asked has nobody). ``scrape_times``:
    when each scrape arrived (monotonic)."""

    def __init__(self, on_scrape: str):
        self.on_scrape, self.scrapes, self.announces = on_scrape, 0, 0
        self.scrape_times: list[float] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"udp://127.0.0.1:{self.sock.getsockname()[1]}/announce"
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import struct

        while not self.stopped:
            try:
                data, addr = self.sock.recvfrom(2048)
            except (TimeoutError, OSError):
                continue
            if len(data) < 16:
                continue
            action, tid = struct.unpack_from(">II", data, 8)
            if action == u.CONNECT:
                self.sock.sendto(u.encode_reply(u.ConnectReply(tid, 42)), addr)
            elif action == u.ANNOUNCE:
                self.announces += 1
                peers = socket.inet_aton("127.9.9.9") + struct.pack(">H", 6881)
                self.sock.sendto(struct.pack(">IIIII", u.ANNOUNCE, tid, 1800, 0, 1) + peers, addr)
            elif action == u.SCRAPE:
                self.scrapes += 1
                self.scrape_times.append(time.monotonic())
                if self.on_scrape == "empty":
                    zeros = bytes(12 * ((len(data) - 16) // 20))
                    self.sock.sendto(struct.pack(">II", u.SCRAPE, tid) + zeros, addr)
                elif self.on_scrape == "error":
                    self.sock.sendto(struct.pack(">II", u.ERROR, tid) + b"scrape not supported", addr)

    def close(self):
        self.stopped = True
        self.thread.join(2)
        self.sock.close()


def test_a_udp_tracker_that_refuses_scrapes_is_learned_for_every_worker_and_announced_to(trackers, settings,
                                                                                       client, keys):
    t = _Udp("error")
    other = Trackers(settings, client, keys)  # another worker of the namespace
    try:
        ih = _hashes(1)[0]
        r = trackers.announce(t.url, ih)
        assert r.ok and r.asked == "announce" and set(r.peers) == {("127.9.9.9", 6881)}
        again = trackers.announce(t.url, ih)
        assert again.ok and again.asked == "announce"
        assert other.announce(t.url, ih).asked == "announce"
        assert t.scrapes == 1  # learned in tracker health: scraped by no worker again
        shown = tracker_report(client, keys, 10)[t.url]["no_scrape_until"]
        assert shown is not None and time.time() + RELEARN_SECONDS - 60 < shown <= time.time() + RELEARN_SECONDS
    finally:
        other.close()
        t.close()


def test_a_scrape_that_times_out_fails_the_tracker_never_reads_empty_and_a_dropper_is_learned(settings, client, keys):
    t = _Udp("silent")
    # no backoff in the way: each visit asks, as a tracker's first failures do
    trackers = Trackers(settings.replace(udp_timeout=0.5, udp_retries=1, tracker_backoff_after=10), client, keys)
    try:
        ih = _hashes(1)[0]
        for _ in range(SILENT_LIMIT):
            start = time.monotonic()
            r = trackers.announce(t.url, ih, time.monotonic() + 3.0)
            assert not r.ok and "TrackerTimeout" in r.error and r.seeders is None
            assert time.monotonic() - start < 3.5
        assert t.announces == 0
        # after SILENT_LIMIT silent scrapes in a row, it is taken as a tracker that drops them
        r = trackers.announce(t.url, ih)
        assert r.ok and r.asked == "announce" and t.announces >= 1
    finally:
        trackers.close()
        t.close()


def test_a_lost_scrape_of_many_torrents_is_one_failure_of_the_tracker(trackers, client, keys):
    t = _Udp("silent")
    try:
        hashes = _hashes(10)
        results = _all(trackers, t.url, hashes)
        assert t.scrapes == 1  # one packet for the ten
        assert all(not r.ok and "TrackerTimeout" in r.error for r in results)
        shown = tracker_report(client, keys, 10)[t.url]
        # one lost request, one failure: below the two in a row that back a tracker off, and one
        # of the SILENT_LIMIT in a row before the tracker is taken as one that drops scrapes
        assert shown["failures"] == 1 and shown["no_scrape_until"] is None, shown
        assert trackers.health.backing_off_until(t.url) is None
        assert trackers.scrapes.failed.get(t.url) == 1
    finally:
        t.close()


def scraped(asking, h: str, urls: list[str]) -> tuple[dict, dict]:
    """One visit's scrape stage on its own (``Asking.scrape_seats``), waited for: what ``ScrapeSeats.of`` gives."""
    seats = asking.scrape_seats([(h, urls)])
    seats.wait()
    return seats.of(0)


def test_scrapes_take_their_places_in_a_trackers_cap_and_the_visit_deadline_starts_after(settings, client, keys):
    from crawler.counters.recorder import Recorder
    from crawler.queue.queue import Queue
    from crawler.source_settings import TrackerSpec
    from workers.visit import Visitor

    t = _Udp("empty")
    rate, n = 4.0, 10
    s = settings.replace(trackers=(TrackerSpec(t.url, 50, rate),), visit_deadline=1.0, udp_timeout=0.5)
    trackers = Trackers(s, client, keys)
    trackers.scrapes.groups.full = lambda url: 1  # a packet per torrent, each taking a place
    visitor = Visitor(Queue(client, keys, s), keys, s, trackers, Recorder(client, keys, s))
    placed = Places(visitor.cap)  # each place in Redis's clock (arrival times would carry a busy machine's lateness)
    try:
        hashes = _hashes(n)
        jobs = [gevent.spawn(scraped, visitor.asking, h, [t.url]) for h in hashes]
        gevent.joinall(jobs, raise_error=True)
        answers = [j.value[0][t.url] for j in jobs]
        # the last waited about (n - 1) / rate = 2.25 s for its place, longer than the 1 s deadline: still answered
        assert all(r.ok and r.asked == "scrape" for r in answers), answers
        assert t.scrapes == n and t.announces == 0
        assert len(placed.requests) == n and max(p.wait for p in placed.requests) > 1e6 * s.visit_deadline
        assert min(gaps([p.at for p in placed.requests])) == 1e6 / rate
    finally:
        trackers.close()
        t.close()


def test_scrape_off_announces_as_before(opentracker, settings, client, keys):  # noqa: F811
    (ih,) = _hashes(1)
    ot = opentracker([ih])
    t = Trackers(settings.replace(scrape_first=False), client, keys)
    try:
        r = t.announce(ot.udp_url, ih)
        assert r.ok and r.asked == "announce" and t.udp.scrapes_sent == 0 and t.udp.announces_sent == 2
    finally:
        t.close()


def test_a_group_waits_while_scrapes_keep_joining_and_no_longer():
    from crawler.sources.trackers.scrape_groups import WINDOW, ScrapeGroups

    sent = []

    def scrape_many(url, hashes, deadline):
        sent.append(len(hashes))
        return [None] * len(hashes)

    # The pause in joins that closes a group, and the longest a group forms, much wider than the defaults:
    # the joins 1 ms apart below stay one group unless the machine stalls this one for a quarter second.
    quiet, window = 0.25, 5.0
    groups = ScrapeGroups(scrape_many, full=lambda url: 74, window=window, quiet=quiet)

    def join(url, info_hash, deadline):  # a visit's scrape: its seat, then its answer
        return groups.seat(url, info_hash, deadline - time.monotonic()).get()

    # 40 visits arriving 1 ms apart (each read tracker health first): one packet
    jobs = [gevent.spawn_later(i * 0.001, join, "udp://t:1/announce", bytes([i]) * 20, time.monotonic() + 5)
            for i in range(40)]
    gevent.joinall(jobs, raise_error=True)
    assert sent == [40]
    # 100 joining in one turn: a full group at once, and the rest in the next
    sent.clear()
    jobs = [gevent.spawn(join, "udp://t:1/announce", bytes([i]) * 20, time.monotonic() + 5)
            for i in range(100)]
    gevent.joinall(jobs, raise_error=True)
    assert sorted(sent) == [26, 74]
    # a lone visit waits one quiet pause, not the whole window
    sent.clear()
    start = time.monotonic()
    assert join("udp://t:1/announce", b"\x01" * 20, time.monotonic() + 5) is None
    assert sent == [1] and time.monotonic() - start < window / 2
    assert WINDOW < 0.1  # the default window: what a lone visit may wait at most


def test_an_http_tracker_answering_404_on_its_scrape_url_is_learned_and_announced_to(trackers, client, keys):
    import socket as _socket
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from crawler.bencode import codec as bencode

    asked = {"scrape": 0, "announce": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/scrape"):
                asked["scrape"] += 1
                self.send_response(404)
                self.end_headers()
                return
            asked["announce"] += 1
            body = bencode.encode({b"interval": 1800, b"complete": 1, b"incomplete": 0,
                                   b"peers": _socket.inet_aton("127.9.9.8") + (6882).to_bytes(2, "big")})
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/announce"
    try:
        a, b = _hashes(2)
        first = trackers.announce(url, a)
        assert first.ok and first.asked == "announce" and set(first.peers) == {("127.9.9.8", 6882)}
        assert tracker_report(client, keys, 10)[url]["no_scrape_until"] is not None
        again = trackers.announce(url, b)
        assert again.ok and again.asked == "announce"
        assert asked["scrape"] == 1  # learned: not scraped again
    finally:
        server.shutdown()
        server.server_close()
