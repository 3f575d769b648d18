"""WebTorrent's ``bittorrent-tracker`` (npm), its HTTP and UDP faces, read right by real visits.

Its HTTP scrape reply keys ``files`` by the UTF-8 text of the info-hash's
bytes (``http_scrape.webtorrent_key``): a hash with a byte from 0x80 up
arrives as a longer key. Read as "the torrent is not listed", a torrent
scraped alone there was taken for an empty swarm and never announced to.
"""

from __future__ import annotations

import hashlib
import urllib.parse
import urllib.request

from crawler.counters.recorder import Recorder
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.sources.trackers.http_scrape import ScrapeCounts, parse_scrape_reply, webtorrent_key
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.webtorrent_tracker import webtorrent_tracker  # noqa: F401 (fixture)
from workers.visit import Visitor


def _high(seed: bytes) -> str:
    """A 40-hex info-hash with several bytes from 0x80 up (WebTorrent writes each as two)."""
    h = hashlib.sha1(seed).digest()
    assert sum(b >= 0x80 for b in h) >= 3 and len(webtorrent_key(h)) > 20
    return h.hex()


def _visit(settings, client, keys, tmp_path, ih: str, urls: tuple[str, ...]):
    """One real visit of ``ih`` naming ``urls`` (scrape first, on): the visit, what it said of each
    tracker, and the worker's ``Trackers`` (closed)."""
    s = settings.replace(geoip_db=write_city_db(tmp_path / "c.mmdb"))
    q = Queue(client, keys, s)
    q.add([NewItem(ih, urls)])
    trackers = Trackers(s, client, keys)
    v = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        (lease,) = q.claim(1)
        visit = v.visit(lease)
    finally:
        trackers.close()
    return visit, QueueView(q.client, q.keys).torrent(ih), trackers


def test_a_swarm_alone_on_its_http_face_is_scraped_announced_and_counted_whole(webtorrent_tracker, settings,  # noqa: F811
                                                                               client, keys, tmp_path):
    ih = _high(b"webtorrent http, six peers")
    wt = webtorrent_tracker()
    for i in range(6):
        wt.announce_from(peer_address(i), ih, 26000 + i, left=0 if i < 2 else 1)
    visit, shown, trackers = _visit(settings, client, keys, tmp_path, ih, (wt.http_url,))
    assert trackers.scrapes.http_requests == 1  # scraped first, alone in its request
    assert (visit.state, visit.peers, visit.answered) == ("cooling", 6, 1)
    assert shown["last_visit_sources"]["trackers"] == {wt.http_url: "announced"}
    assert (shown["seeders"], shown["leechers"]) == (2, 4)  # the withdrawal's counts: the swarm without us


def test_a_swarm_alone_on_its_udp_face_is_scraped_announced_and_counted_whole(webtorrent_tracker, settings,  # noqa: F811
                                                                              client, keys, tmp_path):
    ih = _high(b"webtorrent udp, six peers")
    wt = webtorrent_tracker()
    for i in range(6):
        wt.announce_from(peer_address(10 + i), ih, 26100 + i, left=0 if i < 3 else 1)
    visit, shown, trackers = _visit(settings, client, keys, tmp_path, ih, (wt.udp_url,))
    assert trackers.udp.scrapes_sent == 1 and trackers.scrapes.http_requests == 0
    assert (visit.state, visit.peers, visit.answered) == ("cooling", 6, 1)
    assert shown["last_visit_sources"]["trackers"] == {wt.udp_url: "announced"}
    assert (shown["seeders"], shown["leechers"]) == (3, 3)


def test_a_13_peer_swarm_on_webtorrent_and_opentracker_is_counted_exactly(webtorrent_tracker, opentracker,  # noqa: F811
                                                                          settings, client, keys, tmp_path):
    ih = _high(b"webtorrent beside opentracker, thirteen peers")
    wt, ot = webtorrent_tracker(), opentracker([ih])
    # peers 0-7 on WebTorrent's tracker, 5-12 on opentracker: 13 peers, 3 of them on both
    for i in range(8):
        wt.announce_from(peer_address(20 + i), ih, 26200 + i)
    for i in range(5, 13):
        ot.announce_from(peer_address(20 + i), ih, 26200 + i)
    visit, shown, trackers = _visit(settings, client, keys, tmp_path, ih, (wt.http_url, ot.udp_url))
    assert trackers.scrapes.http_requests == 1 and trackers.udp.scrapes_sent == 1
    assert (visit.peers, visit.answered) == (13, 2)
    assert shown["last_visit_sources"]["trackers"] == {wt.http_url: "announced", ot.udp_url: "announced"}


def test_its_scrape_reply_is_read_for_every_hash_asked_whatever_its_bytes(webtorrent_tracker):  # noqa: F811
    wt = webtorrent_tracker()
    high, low, unknown = _high(b"scraped with two others"), bytes(range(0x41, 0x55)).hex(), "ff" * 20
    for i in range(3):
        wt.announce_from(peer_address(40 + i), high, 26400 + i, left=0 if i == 0 else 1)
    wt.announce_from(peer_address(43), low, 26403)
    asked = [bytes.fromhex(h) for h in (high, low, unknown)]
    query = "&".join("info_hash=" + urllib.parse.quote_from_bytes(h, safe="") for h in asked)
    with urllib.request.urlopen(f"http://127.0.0.1:{wt.http_port}/scrape?{query}", timeout=10) as r:
        body = r.read()
    assert webtorrent_key(asked[0]) in body and asked[0] not in body  # the form this tracker writes
    found = parse_scrape_reply(body, asked)
    # completed: this tracker reports its seeders there
    assert found == {asked[0]: ScrapeCounts(1, 2, 1), asked[1]: ScrapeCounts(0, 1, 0), asked[2]: ScrapeCounts(0, 0, 0)}
    assert (found.listed, found.others) == (3, 0)
