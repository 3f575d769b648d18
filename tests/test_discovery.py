"""Discovery (contract §3; backfeed: the DHT's own hashes fed back into the queue): BEP 51 samples of a loopback libtorrent swarm into the
discovered lane, each hash admitted once across two worker processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import gevent
import pytest
from gevent.event import Event

from crawler.errors import SettingsError
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.sources.dht.dht import DhtSource
from crawler.sources.dht.discovery import MIN_INTERVAL, SILENT_RETRY, Discovery, Frontier
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.cli import run_json
from tests.dht_swarm import Swarm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# At most 20: libtorrent's nodes sample at most 20 of the hashes they store, so one answer holds
# them all (with more, a hash may be missed until the node may be asked again, a minute on).
HASHES = [hashlib.sha1(f"discover-{i}".encode()).hexdigest() for i in range(18)]
# Swarm nodes that allow asking again at once (the crawler's own floor, MIN_INTERVAL, still holds).
SAMPLING = {"dht_sample_infohashes_interval": 0, "dht_max_infohashes_sample_count": 20}


@pytest.fixture(scope="module")
def storing_swarm():
    with Swarm(size=6, first_ip=140, node_extra=SAMPLING) as swarm:
        for i, h in enumerate(HASHES):  # each hash stored by two nodes (and found near its id)
            swarm.announce(h, [i % 6, (i + 2) % 6], 9100)
        swarm.wait_announced({HASHES[0]: {(swarm.ips[0], 9100), (swarm.ips[2], 9102)}})
        time.sleep(0.5)
        yield swarm


def test_the_frontier_honours_each_nodes_interval():
    f = Frontier(max_nodes=3)
    a, b, c, d = ("127.0.0.1", 1), ("127.0.0.2", 2), ("127.0.0.3", 3), ("127.0.0.4", 4)
    for ep in (a, b, c, d):
        f.add(ep, 0.0)
    assert len(f) == 3  # d: past the bound, not remembered
    assert {f.next(0.0), f.next(0.0), f.next(0.0)} == {a, b, c} and f.next(0.0) is None
    f.answered(a, 3600.0, 1.0)
    f.answered(b, 5.0, 1.0)  # asks sooner than our floor
    assert f.next(1.0 + MIN_INTERVAL - 1) is None
    assert f.next(1.0 + MIN_INTERVAL) == b
    f.answered(b, 5000.0, 1.0 + MIN_INTERVAL)
    assert f.next(SILENT_RETRY) == c  # never answered: asked again after the silent retry
    f.answered(c, 7200.0, SILENT_RETRY)
    assert f.next(3600.0) is None and f.next(3601.0) == a
    f.add(a, 0.0)  # heard of again: its turn is not moved
    assert f.next(3602.0) is None


def test_sampled_hashes_enter_the_discovered_lane_once(storing_swarm, client, keys, settings):
    s = settings.replace(dht=True, discovery=True, discovery_rate=50.0, dht_listen=(("127.0.0.230", 0),),
                         dht_bootstrap=tuple(storing_swarm.endpoints[:2]))
    q = Queue(client, keys, s)
    tracked, evicted = HASHES[0], HASHES[1]
    q.add([NewItem(tracked)], lane="high")
    q.add([NewItem(evicted)])
    (lease,) = [x for x in q.claim(2) if x.info_hash == evicted]
    from crawler.queue.scoring import Outcome

    for _ in range(8):  # evicted: its tombstone keeps it out
        q.complete(lease, Outcome.NONE, due=0)
        (lease,) = [x for x in q.claim(2) if x.info_hash == evicted] or [None]
        if lease is None:
            break
    view = QueueView(client, keys)
    assert view.state(evicted)[0] == "evicted"
    with DhtSource(s) as dht:
        d = Discovery(dht, q, client, keys, s)
        stop = Event()
        g = gevent.spawn(d.run, stop)
        end = time.monotonic() + 20
        while time.monotonic() < end and d.figures["admitted"] < len(HASHES) - 2:
            gevent.sleep(0.2)
        stop.set()
        g.join(5)
    assert d.figures["admitted"] == len(HASHES) - 2, d.figures
    assert d.figures["queries"] <= 50 * 20 + 10  # the rate cap held
    for h in HASHES[2:]:
        assert view.lane(h) == "discovered"
    assert view.lane(tracked) == "high" and view.state(evicted)[0] == "evicted"
    assert len(d.frontier) >= 6  # the answers' nodes joined the bootstrap ones


def test_discovery_needs_the_dht():
    with pytest.raises(SettingsError, match="PEERCRAWL_DISCOVERY"):
        Settings.from_env({"PEERCRAWL_DISCOVERY": "on", "PEERCRAWL_DHT": "off"})


@pytest.mark.slow
def test_two_workers_admit_every_sampled_hash_once(storing_swarm, client, namespace, test_env):
    env = {**test_env, "PYTHONPATH": ROOT + os.pathsep + test_env.get("PYTHONPATH", ""),
           "PEERCRAWL_DHT": "on", "PEERCRAWL_DISCOVERY": "on", "PEERCRAWL_DISCOVERY_RATE": "20",
           "PEERCRAWL_DHT_BOOTSTRAP": ",".join(f"{ip}:{port}" for ip, port in storing_swarm.endpoints[:3]),
           "PEERCRAWL_DHT_TIMEOUT": "2"}
    workers = [subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "4", "--duration", "12"],
                                env={**env, "PEERCRAWL_DHT_LISTEN": f"127.0.0.{231 + i}:0"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(2)]
    try:
        _, status = run_json(env, "status")
        for w in workers:
            w.wait(60)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w in workers:
        assert w.returncode == 0, w.stderr.read()[-2000:]
    keys = layout.resolve(client, namespace, None)
    view = QueueView(client, keys)
    assert all(view.lane(h) == "discovered" for h in HASHES), [h for h in HASHES if view.lane(h) != "discovered"]
    minute = int(time.time()) // 60
    admitted = sum(int(client.hget(keys.discovery_minute(m), "admitted") or 0) for m in range(minute - 3, minute + 1))
    sampled = sum(int(client.hget(keys.discovery_minute(m), "sampled") or 0) for m in range(minute - 3, minute + 1))
    assert admitted == len(HASHES)  # once each, across both workers
    assert sampled >= 2 * len(HASHES)  # both workers sampled them
    assert status["discovery"] is not None
