"""Names from peers end to end (workers/metadata_names.py): a real worker with ``PEERCRAWL_METADATA=on``.

Two libtorrent seeders on loopback seed a real three-file torrent and a
single-file one, and announce them to a real opentracker. A worker visits
them: the torrent added as a bare info-hash gets its name, size and file
count from the seeders' metadata, with no payload moved; the one added with
a name keeps it and is never fetched; a torrent whose only peer is a closed
port fails and waits before its next try.
"""

from __future__ import annotations

import time

import gevent
import pytest

from tests.metadata_peers import Seeder, make_torrent
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.test_metadata_fetch import closed_port
from tests.test_worker_e2e import env, pc, pcj  # noqa: F401 (fixture)


@pytest.mark.slow
def test_a_worker_names_a_torrent_from_its_peers_and_moves_no_payload(env, opentracker, tmp_path):  # noqa: F811
    multi, multi_hash = make_torrent(tmp_path, "Tést torrent — three files", [40_000, 1, 70_000])
    single, single_hash = make_torrent(tmp_path, "single.iso", [50_000])
    dead_hash = "de" * 20
    seeders = [Seeder(ip, [multi, single], tmp_path) for ip in ("127.0.0.2", "127.0.0.3")]
    try:
        ot = opentracker([multi_hash, single_hash, dead_hash])
        for s in seeders:
            for ih in (multi_hash, single_hash):
                ot.announce_from(s.ip, ih, s.endpoint[1], left=0)
        ot.announce_from("127.0.0.7", dead_hash, closed_port(), left=0)
        before = [s.uploaded()[0] for s in seeders]
        env.update(PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_DHT="off", PEERCRAWL_METADATA="on",
                   PEERCRAWL_METADATA_LISTEN="127.0.0.1:0", PEERCRAWL_METADATA_TIMEOUT="3",
                   PEERCRAWL_REVISIT_SECONDS="3600")
        pcj(env, "add", multi_hash, dead_hash, f"magnet:?xt=urn:btih:{single_hash}&dn=my+own+name")
        t0 = time.time()
        pc(env, "worker", "--until-idle", "--concurrency", "3", timeout=90)
        named = pcj(env, "torrent", multi_hash)
        assert (named["name"], named["total_size"], named["file_count"]) == ("Tést torrent — three files", 110_001, 3)
        assert named["metadata_next_try"] is None
        kept = pcj(env, "torrent", single_hash)
        assert (kept["name"], kept["total_size"], kept["file_count"]) == ("my own name", None, None)  # never fetched
        dead = pcj(env, "torrent", dead_hash)
        assert dead["name"] is None and dead["file_count"] is None
        assert t0 + 3600 <= dead["metadata_next_try"] <= time.time() + 3600  # the first wait after a failure
        gevent.sleep(0.3)
        assert [s.uploaded()[0] for s in seeders] == before  # no payload left the seeders
    finally:
        for s in seeders:
            s.close()


def test_the_metadata_state_keeps_one_success_never_replaces_a_name_and_widens_waits(client, keys, settings):
    from crawler.queue.queue import Queue
    from crawler.queue.torrent_metadata import FIRST_WAIT, LONGEST_WAIT, TorrentMetadata
    from crawler.torrents.items import NewItem

    named, bare, gone = "a1" * 20, "b2" * 20, "c3" * 20
    q = Queue(client, keys, settings.replace(metadata=True))
    q.add([NewItem(named, name="kept"), NewItem(bare)], now=1.0)
    # a visit's plan reads from when a fetch may start: a first visit offers its peers, a named torrent's never;
    # a process that fetches nothing does not read it
    assert q.plan(named).fetch_from is None and q.plan(bare).fetch_from == 0.0
    assert Queue(client, keys, settings.replace(metadata=False)).plan(bare).fetch_from is None
    # a visit makes the torrent's record; due wants a tracked one (a visits field) without a name
    for h in (named, bare):
        client.hset(keys.for_torrent(h).torrent(h), "visits", 1)
    state, now = TorrentMetadata(client, keys), 1_000_000.0
    assert not state.due(named, now) and state.due(bare, now) and not state.due(gone, now)
    waits = []
    for _ in range(12):
        assert state.failed(bare, now)
        waits.append(float(client.hget(keys.for_torrent(bare).torrent(bare), "md_next")) - now)
    assert waits[:3] == [FIRST_WAIT, 2 * FIRST_WAIT, 4 * FIRST_WAIT] and waits[-1] == LONGEST_WAIT
    assert not state.due(bare, now) and state.due(bare, now + LONGEST_WAIT)
    assert q.plan(bare).fetch_from == now + LONGEST_WAIT
    assert state.found(bare, "from peers", 10, 2, now) and state.found(named, "from peers", 5, 1, now)
    assert q.plan(bare).fetch_from is None
    assert not state.found(gone, "x", 1, 1, now) and not client.exists(keys.for_torrent(gone).torrent(gone))
    got = {h: client.hmget(keys.for_torrent(h).torrent(h), "name", "size", "files", "md_fails", "md_next")
           for h in (named, bare)}
    assert got == {named: [b"kept", b"5", b"1", None, None], bare: [b"from peers", b"10", b"2", None, None]}
    assert not state.due(bare, now + 10 * LONGEST_WAIT)  # one success, ever
    with pytest.raises(Exception, match="metadata_note.lua: bad arguments"):
        state._script(keys=[keys.for_torrent(bare).torrent(bare)], args=["found", "1", "x" * 801, "", "1"])


def test_a_visit_offers_its_peers_for_a_name_only_where_its_plan_says_a_fetch_may_start(opentracker, settings,  # noqa: F811
                                                                                        client, keys):
    from crawler.counters.recorder import Recorder
    from crawler.queue.queue import Queue
    from crawler.sources.trackers.trackers import Trackers
    from crawler.torrents.items import NewItem
    from workers.visit import Visitor

    named, bare, waiting = "d4" * 20, "e5" * 20, "f6" * 20
    ot = opentracker([named, bare, waiting])
    for i in range(3):
        ot.announce_many(peer_address(i), [named, bare, waiting], 6881 + i)
    s = settings.replace(metadata=True)
    q = Queue(client, keys, s)
    q.add([NewItem(named, (ot.udp_url,), name="kept"), NewItem(bare, (ot.udp_url,)),
           NewItem(waiting, (ot.udp_url,))])
    client.hset(keys.for_torrent(waiting).torrent(waiting), "md_next", time.time() + 3600)  # a failed fetch's wait
    offers: list = []

    class Offers:  # in the fetcher's place (workers.metadata_names): what is tested is the visit's choice
        def offer(self, h, peers):
            offers.append((h, len(peers)))

    trackers = Trackers(s, client, keys)
    try:
        visitor = Visitor(q, keys, s, trackers, Recorder(client, keys, s), names=Offers())
        visits = [visitor.visit(lease) for lease in q.claim(3)]
        assert sorted(v.peers for v in visits) == [3, 3, 3]
        assert offers == [(bare, 3)]  # the named torrent and the one still waiting cost no read and no fetch
    finally:
        trackers.close()
