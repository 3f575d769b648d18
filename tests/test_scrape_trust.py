"""What a torrent left out of an HTTP scrape reply means (crawler/sources/trackers/tracker_scrapes.py).

"Empty" only when the tracker read the torrent's ``info_hash`` and answered in
keys that are the hashes asked; otherwise the torrent is announced to. Each
tracker here is a loopback HTTP server shaped like one users meet: keys in
another form, chihaya's first 50 ``info_hash`` read, a PHP tracker's last.
"""

from __future__ import annotations

import os
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawler.bencode import codec as bencode
from crawler.sources.trackers.http_scrape import ScrapeCounts
from crawler.sources.trackers.tracker_scrapes import EMPTY
from crawler.sources.trackers.trackers import Trackers


class Tracker:
    """An HTTP tracker on 127.0.0.1. ``swarms``: info-hash -> (seeders, leechers); its scrape lists
    the hashes it reads (``reads``: "all", "first50" or "last") that it holds, or every one it reads
    with zeros for the others (``zeros``), keyed as ``keys`` says ("raw" or "hex"). An announce
    answers one peer, and so does a scrape with ``announce_page``. ``scraped``: the info_hash lists
    its scrapes asked for."""

    def __init__(self):
        self.swarms: dict[bytes, tuple[int, int]] = {}
        self.reads, self.keys, self.zeros = "all", "raw", False
        self.announce_page = False  # its scrape URL answers as its announce URL does
        self.scraped: list[list[bytes]] = []
        tracker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path, _, query = self.path.partition("?")
                if path == "/scrape" and not tracker.announce_page:
                    body = tracker.scrape([urllib.parse.unquote_to_bytes(v) for k, _, v in
                                           (p.partition("=") for p in query.split("&")) if k == "info_hash"])
                else:
                    peer = socket.inet_aton("127.9.9.7") + (6883).to_bytes(2, "big")
                    body = bencode.encode({b"interval": 1800, b"complete": 1, b"incomplete": 0, b"peers": peer})
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/announce"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def scrape(self, asked: list[bytes]) -> bytes:
        self.scraped.append(asked)
        read = {"all": asked, "first50": asked[:50], "last": asked[-1:]}[self.reads]
        files = {}
        for ih in read:
            if ih in self.swarms or self.zeros:
                s, lc = self.swarms.get(ih, (0, 0))
                key = ih if self.keys == "raw" else ih.hex().encode()
                files[key] = {b"complete": s, b"incomplete": lc, b"downloaded": s}
        return bencode.encode({b"files": files})

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tracker():
    t = Tracker()
    yield t
    t.close()


@pytest.fixture
def trackers(settings, client, keys):
    t = Trackers(settings.replace(http_timeout=5.0), client, keys)
    yield t
    t.close()


def _hashes(n: int) -> list[bytes]:
    return [os.urandom(20) for _ in range(n)]


def _scrape(trackers, url: str, hashes: list[bytes]) -> list:
    """The answers of one request asking ``hashes`` in their order (seats taken by one greenlet)."""
    seats = [trackers.scrapes.seat(url, ih, 5.0) for ih in hashes]
    return [trackers.scrapes.answer(url, seat) for seat in seats]


def test_a_reply_in_keys_that_are_no_asked_hash_is_never_read_empty_until_one_in_asked_keys(tracker, trackers):
    a, b, c, d = _hashes(4)
    tracker.swarms = {a: (0, 3), c: (1, 0)}
    tracker.keys = "hex"
    # asked alone, listed under a key that is no form of its hash: announced, not "empty"
    r = trackers.announce(tracker.url, a.hex())
    assert r.ok and r.asked == "announce" and set(r.peers) == {("127.9.9.7", 6883)}
    assert trackers.scrapes.distrust.get(tracker.url)
    # a reply that lists nothing proves nothing: still announced
    tracker.keys = "raw"
    assert _scrape(trackers, tracker.url, [b]) == [None]
    # a reply whose keys are all asked hashes shows the tracker readable again
    assert _scrape(trackers, tracker.url, [c]) == [ScrapeCounts(1, 0, 1)]
    assert trackers.scrapes.distrust.get(tracker.url) is None
    assert _scrape(trackers, tracker.url, [d]) == [EMPTY]
    assert trackers.announce(tracker.url, d.hex()).asked == "scrape"
    assert len(tracker.scraped) == 5


def test_past_the_info_hashes_a_tracker_reads_a_torrent_left_out_is_announced_to(tracker, trackers):
    # chihaya reads the first 50 info_hash of a scrape (max_scrape_infohashes) and lists each one
    # it read, zeros for a swarm it does not hold
    tracker.reads, tracker.zeros = "first50", True
    hashes = _hashes(64)
    tracker.swarms = {hashes[7]: (2, 1), hashes[60]: (5, 5)}
    answers = _scrape(trackers, tracker.url, hashes)
    assert len(tracker.scraped) == 1 and len(tracker.scraped[0]) == 64
    assert answers[7] == ScrapeCounts(2, 1, 2)
    assert all(x == EMPTY for i, x in enumerate(answers[:50]) if i != 7)
    assert answers[50:] == [None] * 14  # hashes[60] has ten peers: announced, never "empty"
    assert trackers.scrapes.reads.get(tracker.url) == 50
    # opentracker-like replies from then on (only swarms held listed): read as deep as seen, no deeper
    tracker.zeros = False
    again = _scrape(trackers, tracker.url, hashes)
    assert again[:50] == answers[:50] and again[50:] == [None] * 14


def test_a_tracker_that_reads_only_the_last_info_hash_never_has_the_others_read_empty(tracker, trackers):
    # a PHP tracker reading $_GET['info_hash'] sees the last of the repeated parameters only
    tracker.reads = "last"
    for _ in range(2):
        hashes = _hashes(3)
        tracker.swarms = {hashes[0]: (1, 1), hashes[2]: (0, 4)}
        assert _scrape(trackers, tracker.url, hashes) == [None, None, ScrapeCounts(0, 4, 0)]
    assert trackers.scrapes.reads.get(tracker.url) is None
    # asked alone, a torrent it does not list is empty there
    assert _scrape(trackers, tracker.url, _hashes(1)) == [EMPTY]


def test_a_scrape_url_that_answers_with_no_files_dictionary_is_learned_as_one_that_cannot_scrape(tracker, trackers):
    tracker.announce_page = True
    (ih,) = _hashes(1)
    r = trackers.announce(tracker.url, ih.hex())
    assert r.ok and r.asked == "announce" and set(r.peers) == {("127.9.9.7", 6883)}
    assert trackers.health.no_scrape_until(tracker.url) is not None


class ShortUdpTracker:
    """A UDP tracker on 127.0.0.1 that reads the first ``reads`` info-hashes of a scrape packet and
    answers an entry for each (zeros for swarms it does not hold), as chihaya (50) and aquatic (70)
    do; ``swarms``: info-hash -> (seeders, leechers)."""

    def __init__(self, reads: int):
        import struct

        from crawler.sources.trackers import udp_codec as u

        self.reads, self.swarms, self.scrapes = reads, {}, 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"udp://127.0.0.1:{self.sock.getsockname()[1]}/announce"

        def serve():
            while True:
                try:
                    data, addr = self.sock.recvfrom(2048)
                except OSError:
                    return
                action, tid = struct.unpack_from(">II", data, 8)
                if len(data) == 16:
                    self.sock.sendto(u.encode_reply(u.ConnectReply(tid, 99)), addr)
                elif action == 2:
                    self.scrapes += 1
                    asked = [data[o:o + 20] for o in range(16, len(data), 20)][: self.reads]
                    entries = tuple(u.ScrapeEntry(self.swarms.get(h, (0, 0))[0], 0, self.swarms.get(h, (0, 0))[1])
                                    for h in asked)
                    self.sock.sendto(u.encode_reply(u.ScrapeReply(tid, entries)), addr)

        threading.Thread(target=serve, daemon=True).start()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("reads", [50, 70])
def test_a_udp_scrape_answered_short_is_what_the_tracker_read_and_the_rest_are_announced(trackers, reads):
    t = ShortUdpTracker(reads)
    try:
        hashes = _hashes(74)
        t.swarms = {hashes[3]: (4, 2), hashes[reads + 1]: (1, 1)}
        answers = _scrape(trackers, t.url, hashes)
        assert t.scrapes == 1
        assert answers[3] == ScrapeCounts(4, 2, 0)
        assert all(x == EMPTY or x == ScrapeCounts(0, 0, 0) for i, x in enumerate(answers[:reads]) if i != 3)
        assert answers[reads:] == [None] * (74 - reads)  # not read: announced (hashes[reads + 1] has peers)
        assert trackers.scrapes.failed.get(t.url) is None  # a short reply is no failure of the tracker
    finally:
        t.close()
