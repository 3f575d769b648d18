"""Trackers learned to mirror each other (crawler/sources/trackers/tracker_mirrors.py), by real visits to real
opentrackers: one announce where two would list the same peers, and never a peer lost for it."""

from __future__ import annotations

import os

from crawler.counters.recorder import Recorder
from crawler.queue.queue import Queue
from crawler.queue.source_notes import TRACKER_CODES
from crawler.queue.view import QueueView
from crawler.sources.result import SourceResult
from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.tracker_mirrors import CHECK_EVERY, LEARN, Mirrors
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests.hostile import LoopbackUdpTracker
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from workers.visit import Visitor

STOOD_IN = TRACKER_CODES["m"]


def _hashes(n):
    return [os.urandom(20).hex() for _ in range(n)]


class _Crawl:
    """One worker's visits, one torrent at a time."""

    def __init__(self, settings, client, keys, tmp_path):
        s = settings.replace(geoip_db=write_city_db(tmp_path / "c.mmdb"), udp_timeout=0.5, udp_retries=1)
        self.q = Queue(client, keys, s)
        self.trackers = Trackers(s, client, keys)
        self.visitor = Visitor(self.q, keys, s, self.trackers, Recorder(client, keys, s))

    def visit(self, h, urls):
        """``h``, naming ``urls``, added and visited: (the visit, what it said of each tracker)."""
        self.q.add([NewItem(h, tuple(urls))])
        (lease,) = self.q.claim(1)
        assert lease.info_hash == h
        visit = self.visitor.visit(lease)
        return visit, QueueView(self.q.client, self.q.keys).torrent(h)["last_visit_sources"]["trackers"]

    def close(self):
        self.trackers.close()


def _swarms(hashes, *trackers, first=0, per=3):
    """``per`` seeders in each swarm, the same ones on every tracker of ``trackers``; their addresses."""
    peers = {}
    for k, h in enumerate(hashes):
        peers[h] = [peer_address(first + per * k + i) for i in range(per)]
        for t in trackers:
            for i, ip in enumerate(peers[h]):
                t.announce_from(ip, h, 27000 + i, left=0)
    return peers


def test_two_trackers_listing_the_same_peers_are_announced_to_once_and_every_peer_is_counted(
        opentracker, settings, client, keys, tmp_path):  # noqa: F811
    hashes = _hashes(LEARN + 6)
    udp, http = opentracker(hashes), opentracker(hashes)  # two trackers, two swarm stores
    _swarms(hashes, udp, http)
    crawl = _Crawl(settings, client, keys, tmp_path)
    try:
        said = []
        for h in hashes:
            visit, trackers = crawl.visit(h, (http.http_url, udp.udp_url))
            assert (visit.state, visit.peers, visit.new) == ("cooling", 3, 3)
            said.append(trackers)
        # both asked until the pair is learned; then the UDP one (two datagrams) stands in for the HTTP one
        assert said[:LEARN] == [{http.http_url: "announced", udp.udp_url: "announced"}] * LEARN
        assert said[LEARN:] == [{http.http_url: STOOD_IN, udp.udp_url: "announced"}] * 6
        assert crawl.trackers.http_announces_sent == 2 * LEARN  # announces and withdrawals
        assert crawl.visitor.asking.mirrors.stood_in == 6
    finally:
        crawl.close()


def test_a_mirror_whose_count_differs_is_asked_and_one_that_lists_other_peers_is_forgotten(
        opentracker, settings, client, keys, tmp_path):  # noqa: F811
    learn, extra, again, other, after = _hashes(LEARN), _hashes(1), _hashes(LEARN), _hashes(1), _hashes(1)
    udp, http = (opentracker(learn + extra + again + other + after) for _ in range(2))
    _swarms(learn + again + after, udp, http)
    # one more peer on the HTTP tracker: its count differs, so it is asked (and counted)
    _swarms(extra, udp, http, first=100)
    http.announce_from(peer_address(120), extra[0], 27009, left=0)
    # as many peers on each, but not the same ones: equal counts, different peers (the pair drifts apart)
    _swarms(other, udp, first=200)
    _swarms(other, http, first=210)
    both = {udp.udp_url: "announced", http.http_url: "announced"}
    urls = (udp.udp_url, http.http_url)
    crawl = _Crawl(settings, client, keys, tmp_path)
    mirrors = crawl.visitor.asking.mirrors
    try:
        for h in learn:
            crawl.visit(h, urls)
        visit, said = crawl.visit(extra[0], urls)
        assert said == both and visit.peers == 4
        assert len(mirrors.pairs) == 0  # their peers differed: learned again from scratch
        for h in again:
            assert crawl.visit(h, urls)[1] == both
        (key,) = mirrors.pairs
        mirrors.pairs[key][1] = CHECK_EVERY - 1  # the next stand-in is a check: both are asked
        visit, said = crawl.visit(other[0], urls)
        assert said == both and visit.peers == 6
        assert len(mirrors.pairs) == 0
        visit, said = crawl.visit(after[0], urls)
        assert said == both and visit.peers == 3
    finally:
        crawl.close()


class _FlakyUdp(LoopbackUdpTracker):
    """A UDP tracker whose scrapes report 3 seeders per torrent and whose announces list three fixed
    peers, until ``silent``: then it answers scrapes alone."""

    def __init__(self, peers):
        self.peers = tuple((ip, 27000 + i) for i, ip in enumerate(peers))
        self.silent, self.announces = False, 0
        super().__init__()

    def answer(self, req, addr):
        if self.silent:
            return None
        self.announces += 1
        return u.AnnounceReply(req.transaction_id, 1800, 0, 3, self.peers)

    def scrape(self, tid, hashes, addr):
        return u.ScrapeReply(tid, tuple(u.ScrapeEntry(3, 0, 0) for _ in hashes))


def test_when_the_tracker_asked_in_a_mirrors_place_fails_the_mirror_is_asked(
        opentracker, settings, client, keys, tmp_path):  # noqa: F811
    hashes = _hashes(LEARN + 1)
    peers = [peer_address(300 + i) for i in range(3)]
    flaky, http = _FlakyUdp(peers), opentracker(hashes)
    for h in hashes:
        for i, ip in enumerate(peers):
            http.announce_from(ip, h, 27000 + i, left=0)
    crawl = _Crawl(settings, client, keys, tmp_path)
    try:
        for h in hashes[:LEARN]:
            assert crawl.visit(h, (flaky.url, http.http_url))[1][http.http_url] == "announced"
        flaky.silent = True
        visit, said = crawl.visit(hashes[-1], (flaky.url, http.http_url))
        assert said == {flaky.url: "failed", http.http_url: "announced"}
        assert (visit.state, visit.peers) == ("cooling", 3)
    finally:
        crawl.close()
        flaky.close()


def _answer(url, peers, max_peers=50, asked="announce"):
    return SourceResult(source=url, ok=True, peers=frozenset(peers), max_peers=max_peers, asked=asked)


def test_what_a_pair_is_learned_from():
    a, b, c = "udp://a.example:1/announce", "http://b.example/announce", "udp://c.example:2/announce"
    same = [("10.0.0.1", 1), ("10.0.0.2", 2)]
    counts = dict.fromkeys((a, b, c), object())
    m = Mirrors(16)
    for _ in range(LEARN - 1):
        m.learn([_answer(a, same), _answer(b, same), SourceResult.failed(c, "down")])
    assert m.stand_ins([b, a], counts) == {}
    # answers that prove nothing: a full one (the swarm may be larger), an empty one, a scrape
    m.learn([_answer(a, same, max_peers=2), _answer(b, same, max_peers=2)])
    m.learn([_answer(a, []), _answer(b, [])])
    m.learn([_answer(a, same, asked="scrape"), _answer(b, same)])
    assert m.stand_ins([b, a], counts) == {}
    m.learn([_answer(a, same), _answer(b, same)])
    assert m.stand_ins([b, a], counts) == {b: a}  # the UDP one is asked, whatever the order
    assert m.stand_ins([b, a], {a: counts[a], b: object()}) == {}  # counts that differ
    assert m.stand_ins([b, a], {a: counts[a]}) == {}  # no count from the other
    assert m.stand_ins([b, c], counts) == {}  # not a pair
    # one in CHECK_EVERY would-be stand-ins asks both
    asked_both = sum(m.stand_ins([a, b], counts) == {} for _ in range(4 * CHECK_EVERY))
    assert asked_both == 4 and m.checked == 4
    m.learn([_answer(a, same), _answer(b, same[:1])])
    assert m.stand_ins([a, b], counts) == {}


def test_of_two_mirrors_the_one_without_a_rate_of_its_own_is_asked():
    capped, free = "udp://capped.example:1/announce", "http://free.example/announce"
    same = [("10.0.0.1", 1)]
    m = Mirrors(16, frozenset({capped}))
    for _ in range(LEARN):
        m.learn([_answer(capped, same), _answer(free, same)])
    counts = dict.fromkeys((capped, free), object())
    assert m.stand_ins([capped, free], counts) == {capped: free}  # though UDP comes before HTTP
