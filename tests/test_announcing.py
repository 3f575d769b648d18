"""A batch's announces under way (``workers.announcing``): each visit answered as its last source is,
the rest going on apart at the cut, the deadline failing a silent source; then a worker whose batch
holds a torrent a tracker never answers (its announce, or its scrape: ``workers.scrape_seats``)
settles the others without waiting for it."""

from __future__ import annotations

import hashlib
import os
import socket
import time

import gevent
import pytest

from crawler.errors import StoreError
from crawler.queue.queue import Queue
from crawler.source_settings import TrackerSpec
from crawler.sources.result import SourceResult
from crawler.torrents.items import NewItem
from tests import hostile
from tests.hostile import udp_tracker  # noqa: F401 (fixture)
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from workers.announcing import NO_ANSWER, Announcing
from workers.process import Process


def answer(source: str) -> SourceResult:
    return SourceResult(source=source, ok=True, max_peers=50)


def tracker_job(url: str, delays: list[float]):
    """A stand-in for ``Trackers.announce_many``: position ``j`` answered after ``delays[j]`` seconds."""

    def ask(deliver) -> None:
        for j, delay in sorted(enumerate(delays), key=lambda x: x[1]):
            gevent.sleep(max(delay - (time.monotonic() - began), 0))
            deliver(j, answer(url))

    began = time.monotonic()
    return ask


def test_each_visit_is_answered_as_its_last_source_is_and_the_rest_go_on_apart_at_the_cut():
    asks = [("a", ["u1"], False), ("b", ["u1"], False), ("c", ["u1", "u2"], False), ("d", [], False)]
    a = Announcing(asks, time.monotonic() + 10, lambda r: r)
    a.tracker("u1", [0, 1, 2], 0.0, tracker_job("u1", [0.0, 0.01, 0.02]))
    a.tracker("u2", [2], 0.0, tracker_job("u2", [1.5]))
    # three of four answered at once (d asks nothing); c waits for u2: it goes on apart at the cut
    assert a.wait(cut=True) == {0, 1, 3}
    assert [r.source for r in a.of(0)] == ["u1"] and a.of(3) == []
    a.wait()
    assert [(r.source, r.ok) for r in a.of(2)] == [("u1", True), ("u2", True)]


def test_without_a_cut_every_visit_is_waited_for():
    a = Announcing([("a", ["u1"], False), ("b", ["u2"], False)], time.monotonic() + 10, lambda r: r)
    a.tracker("u1", [0], 0.0, tracker_job("u1", [0.0]))
    a.tracker("u2", [1], 0.0, tracker_job("u2", [0.3]))
    assert a.wait() == {0, 1}


def test_a_source_silent_past_the_deadline_is_its_failure_and_its_job_is_stopped():
    a = Announcing([("a", ["u1", "dead"], True)], time.monotonic() + 0.2, lambda r: r)
    a.tracker("u1", [0], 0.0, tracker_job("u1", [0.0]))
    a.tracker("dead", [0], 0.0, tracker_job("dead", [60.0]))
    a.lookup(0, 0.0, lambda: None)  # a lookup that found nothing to say
    assert a.wait() == {0}
    got = {r.source: r for r in a.of(0)}
    assert got["u1"].ok and not got["dead"].ok and got["dead"].error == NO_ANSWER
    assert not got["dht"].ok and got["dht"].error == NO_ANSWER
    gevent.joinall(a.jobs, timeout=1.0)  # the stopped job ends at once, not in its 60 s
    assert all(j.ready() for j in a.jobs)


def test_a_jobs_store_error_is_raised_and_a_bug_is_its_sources_failure():
    a = Announcing([("a", ["u1"], False), ("b", ["u2"], False)], time.monotonic() + 10, lambda r: r)

    def broken(deliver):
        raise ValueError("odd bytes")

    a.tracker("u1", [0], 0.0, broken)
    a.tracker("u2", [1], 0.0, tracker_job("u2", [0.0]))
    assert a.wait() == {0, 1}
    assert not a.of(0)[0].ok and "ValueError: odd bytes" in a.of(0)[0].error

    b = Announcing([("a", ["u1"], False)], time.monotonic() + 10, lambda r: r)

    def redis_away(deliver):
        raise StoreError("Redis away")

    b.tracker("u1", [0], 0.0, redis_away)
    with pytest.raises(StoreError):
        b.wait(cut=True)


def test_a_batch_settles_without_waiting_for_a_torrent_its_tracker_never_answers(  # noqa: F811
        udp_tracker, settings, client, keys, tmp_path):
    good = [bytes([hostile.UDP_GOOD]).hex() + hashlib.sha1(f"cut-{i}".encode()).hexdigest()[2:] for i in range(8)]
    silent = bytes([hostile.UDP_SILENT]).hex() + os.urandom(19).hex()
    s = settings.replace(trackers=(TrackerSpec(udp_tracker.url, 50),), scrape_first=False, udp_timeout=2.0,
                         udp_retries=1, tracker_backoff_after=1000, geoip_db=write_city_db(tmp_path / "c.mmdb"))
    Queue(client, keys, s).add([NewItem(h) for h in [silent, *good]])
    ended: dict[str, tuple[float, object]] = {}
    p = Process(s, client, keys, concurrency=16, until_idle=True, flush=False,
                on_visit=lambda v: ended.setdefault(v.info_hash, (time.monotonic(), v)))
    t0 = time.monotonic()
    assert p.run(signals=False) == 0
    # one batch of nine: the eight answered settled at once, the silent one on its own after its 2 s try
    assert all(ended[h][1].state == "cooling" and ended[h][1].peers == len(hostile.GOOD_PEERS) for h in good)
    assert ended[silent][1].state == "failed" and "no announce reply" in ended[silent][1].error
    assert max(ended[h][0] for h in good) - t0 < 1.5 <= ended[silent][0] - t0
    assert p.worker.slots.claimed == 9 and not p.worker.slots.held


def test_a_batch_settles_without_waiting_for_a_scrape_its_tracker_never_answers(opentracker, settings, client,  # noqa: F811
                                                                               keys, tmp_path):
    good = [hashlib.sha1(f"scrape-cut-{i}".encode()).hexdigest() for i in range(8)]
    lost = hashlib.sha1(b"scrape-cut-lost").hexdigest()
    ot = opentracker(good)
    for i, h in enumerate(good):
        ot.announce_from(peer_address(i), h, 6881)
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # reads nothing, answers nothing
    silent.bind(("127.0.0.1", 0))
    s = settings.replace(udp_timeout=2.0, udp_retries=1, tracker_backoff_after=1000,
                         geoip_db=write_city_db(tmp_path / "c.mmdb"))
    Queue(client, keys, s).add([NewItem(h, (ot.udp_url,)) for h in good]
                               + [NewItem(lost, (f"udp://127.0.0.1:{silent.getsockname()[1]}/announce",))])
    ended: dict[str, tuple[float, object]] = {}
    p = Process(s, client, keys, concurrency=16, until_idle=True, flush=False,
                on_visit=lambda v: ended.setdefault(v.info_hash, (time.monotonic(), v)))
    t0 = time.monotonic()
    try:
        assert p.run(signals=False) == 0
    finally:
        silent.close()
    # the eight scraped and announced at once; the ninth's scrape waited for its 2 s try on its own
    assert all(ended[h][1].state == "cooling" and ended[h][1].peers == 1 for h in good)
    assert ended[lost][1].state == "failed"
    assert max(ended[h][0] for h in good) - t0 < 1.5 <= ended[lost][0] - t0
