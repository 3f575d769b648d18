"""A metadata fetch cut short by its worker's stop (workers/metadata_names.py, TorrentMetadata.cut).

``worker --until-idle`` ends once no torrent is ready or in flight; fetches
still running get a grace and then the fetcher is closed. Such a fetch says
nothing of the torrent: it is logged as cut, counted as no failure, and the
torrent is due again within the retry delay of a failed visit
(PEERCRAWL_RETRY_SECONDS), so a run soon visits it and fetches again.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest
from gevent.event import Event

from crawler.bencode import codec as bencode
from tests.metadata_peers import FakePeer
from tests.opentracker import opentracker  # noqa: F401 (fixture)
from tests.test_worker_e2e import env, pc, pcj  # noqa: F401 (fixture)

# PEERCRAWL_RETRY_SECONDS here: how soon a cut torrent is visited again.
RETRY = 2


def events(stderr: str, name: str) -> list[dict]:
    """The JSON log lines of event ``name``."""
    out = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == name:
            out.append(record)
    return out


@pytest.mark.slow
def test_a_fetch_the_stop_cuts_is_logged_and_tried_again_at_the_next_run(env, opentracker):  # noqa: F811
    # The peer keeps the metadata back until the test opens the gate: the first run's fetch is still
    # waiting when the run goes idle, and outlives the shutdown grace (5 s) within its 20 s deadline.
    info = bencode.encode({"name": "held back", "length": 7, "piece length": 16384, "pieces": bytes(20)})
    gate = Event()
    with FakePeer("127.0.0.42", info, gate=gate) as peer:
        h = hashlib.sha1(info).hexdigest()
        ot = opentracker([h])
        ot.announce_from(peer.endpoint[0], h, peer.endpoint[1], left=0)
        env.update(PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_DHT="off", PEERCRAWL_METADATA="on",
                   PEERCRAWL_METADATA_LISTEN="127.0.0.43:0", PEERCRAWL_METADATA_TIMEOUT="20",
                   PEERCRAWL_REVISIT_SECONDS="3600", PEERCRAWL_RETRY_SECONDS=str(RETRY))
        pcj(env, "add", h)
        first = pc(env, "worker", "--until-idle", "--concurrency", "1", timeout=90).stderr
        stopped = time.time()
        assert peer.peer_ids, first[-3000:]
        [cut] = events(first, "metadata_fetch_cut")
        assert cut["info_hash"] == h and cut["torrent"] == "due" and "not a failure" in cut["message"], cut
        t = pcj(env, "torrent", h)
        assert t["name"] is None and t["metadata_next_try"] is None, t  # no failure counted, no wait set
        # Due within RETRY of the cut (ready by now, perhaps), not at its revisit an hour away.
        assert t["visits"] == 1 and (t["state"] == "ready" or t["due"] <= stopped + RETRY), t
        gate.set()
        time.sleep(max((t["due"] or 0) - time.time(), 0))
        second = pc(env, "worker", "--until-idle", "--concurrency", "1", timeout=90).stderr
        assert events(second, "metadata_fetch_cut") == []
        t = pcj(env, "torrent", h)
        assert (t["visits"], t["name"], t["total_size"], t["file_count"]) == (2, "held back", 7, 1), t


def test_cuts_are_no_failures_and_only_a_few_in_a_row_make_a_torrent_due(client, keys, settings):
    from crawler.queue.queue import Queue
    from crawler.queue.torrent_metadata import MAX_CUTS, TorrentMetadata
    from crawler.torrents.items import NewItem

    h, named = "c1" * 20, "d2" * 20
    queue = Queue(client, keys, settings)
    queue.add([NewItem(h), NewItem(named)], now=1.0)
    state, now = TorrentMetadata(client, keys), 1_000_000.0
    leases = queue.claim(2, now=now)
    assert sorted(lease.info_hash for lease in leases) == sorted([h, named])
    for lease in leases:  # visited: cooling for an hour
        queue.complete(lease, queue_outcome(), now=now, due=now + 3600)
        assert client.zscore(keys.for_torrent(lease.info_hash).cooling, lease.info_hash) == now + 3600
    torrent, retry = keys.for_torrent(h).torrent(h), 300.0
    assert state.cut(h, now, retry) == "due" and client.zscore(keys.for_torrent(h).cooling, h) == now + retry
    assert client.hget(torrent, "md_fails") is None and client.hget(torrent, "md_next") is None
    for _ in range(MAX_CUTS - 1):
        assert state.cut(h, now, retry) == "ready"  # due by then already: nothing moves
    assert state.cut(h, now - 100, retry) == "waits"  # past MAX_CUTS in a row: its own next visit
    assert client.zscore(keys.for_torrent(h).cooling, h) == now + retry
    assert state.failed(h, now) and client.hget(torrent, "md_cuts") is None  # a failure ends the row
    assert state.cut(h, now - 100, retry) == "due"  # brought forward again
    assert state.found(named, "named", 1, 1, now)
    assert state.cut(named, now, retry) == "gone"  # its success is in: nothing to try again
    assert state.cut("e3" * 20, now, retry) == "gone"
    assert not client.exists(keys.for_torrent("e3" * 20).torrent("e3" * 20))


def queue_outcome():
    from crawler.queue.scoring import SourceCount, outcome

    return outcome(1, 1, [SourceCount(1, 50)], 0.5)
