"""Moving a crawl to another shard count (contract §9): every torrent whole, once, after any crash."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time

import pytest

from crawler.errors import SettingsError
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.resharding import Reshard
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.registry.worker_registry import WorkerRegistry
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.cli import run, run_json
from tests.test_cluster import SECRET, cluster_ns  # noqa: F401 (fixture)

T = 1_000_000.0


def hashes(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha1(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def crawl_in_every_state(client, keys: Keys, settings, hs: list[str]) -> None:
    """``hs`` spread over ready, cooling, in flight, evicted and quarantined, with trackers,
    history, tracker holds, tombstones and quarantine records."""
    s = settings.replace(quarantine_after=1)
    q = Queue(client, keys, s)
    q.add([NewItem(h, (f"udp://127.0.0.1:{1000 + i % 7}/announce",)) for i, h in enumerate(hs)], now=T)
    leases = []
    while got := q.claim(500, now=T):
        leases += got
    for i, lease in enumerate(leases):
        kind = i % 5
        if kind == 0:
            q.complete(lease, Outcome.FULL, peers=3, seeders=2, leechers=1, now=T, due=T + 86400,  # cooling
                       reported=5, new=3)  # with its coverage figures
            q.hold_trackers(lease.info_hash, {"udp://127.0.0.1:1000/announce": T + 50}, 3600)
        elif kind == 1:
            q.release(lease, now=T)  # ready
        elif kind == 2:
            q.complete(lease, Outcome.SOME, now=T, due=T + 10)
        elif kind == 3:
            pass  # in flight, its lease expiring at T + lease_seconds
        else:
            q.fail(lease, "nobody answered", now=T, due=T + 86400)
    # evictions: scores pushed below the floor, each leaving a tombstone
    for lease in [l for i, l in enumerate(leases) if i % 5 == 2][:10]:
        q2 = Queue(client, keys, s.replace(evict_below=2.0))
        (again,) = [x for x in q2.claim(1000, now=T + 11) if x.info_hash == lease.info_hash] or [None]
        if again:
            q2.complete(again, Outcome.NONE, now=T + 11)
    # quarantine: in-flight leases expired once (quarantine_after=1)
    q.housekeep(now=T + s.lease_seconds + 20)


def snapshot(client, keys: Keys, hs: list[str], now: float) -> tuple[dict, dict]:
    view = QueueView(client, keys)
    counts = view.counts(now)
    counts.pop("queue_latency_s")
    return counts, {h: view.torrent(h, now) for h in hs}


@pytest.mark.parametrize("to", [5, 1024])
def test_a_single_redis_crawl_moves_into_shards_whole(client, namespace, settings, to):
    hs = hashes(400, str(to))
    crawl_in_every_state(client, Keys(namespace), settings, hs)  # as written before layouts existed
    now = T + settings.lease_seconds + 30
    before = snapshot(client, Keys(namespace), hs, now)
    assert {v["state"] for v in before[1].values()} == {"ready", "cooling", "evicted", "quarantined"}
    assert {v["coverage"] for v in before[1].values()} == {None, 0.6}  # 3 of 5 moves with its torrent
    result = Reshard(client, namespace, to).run(now)
    assert result == {"from": 1, "to": to, "moved": 400}
    keys = layout.resolve(client, namespace, None)
    assert keys.shards == to and keys.counter_shards == 1  # the counters stay where their marks are
    assert snapshot(client, keys, hs, now) == before
    home = Keys(namespace)
    for name in ("ready", "since", "cooling", "leases", "evicted", "held", "claims", "tombstones"):
        assert not client.exists(getattr(home, name)), name
    assert not any(client.exists(home.torrent(h), home.trackers(h), home.history(h)) for h in hs)
    # and the crawl goes on: every ready torrent is claimable from its new shard
    q = Queue(client, keys, settings)
    got = []
    while part := q.claim(500, now=now + 100):
        got += part
    assert sorted(l.info_hash for l in got) == sorted(h for h, v in before[1].items() if v["state"] == "ready")


def test_shards_move_back_and_forth_and_a_second_run_changes_nothing(client, namespace, settings):
    hs = hashes(300, "bf")
    layout.resolve(client, namespace, 4, 1 << 20)  # its mark buckets stay through every move
    crawl_in_every_state(client, Keys(namespace, 4), settings, hs)
    now = T + settings.lease_seconds + 30
    before = snapshot(client, Keys(namespace, 4), hs, now)
    assert Reshard(client, namespace, 7).run(now)["moved"] > 200
    assert Reshard(client, namespace, 7).run(now)["moved"] == 0
    assert snapshot(client, layout.resolve(client, namespace, None), hs, now) == before
    assert Reshard(client, namespace, 1).run(now)["moved"] == 300
    assert snapshot(client, Keys(namespace), hs, now) == before
    assert layout.read(client, Keys(namespace)) == {"shards": 1, "counters": 4, "marks": 1 << 20, "rosters": True}
    assert layout.resolve(client, namespace, None).rosters


def test_a_move_refuses_while_workers_run_and_workers_refuse_during_a_move(client, namespace, settings):
    layout.resolve(client, namespace, None)
    WorkerRegistry(client, Keys(namespace)).write("host-1-1", {"pid": 1}, 30, time.time())
    with pytest.raises(SettingsError, match="running .*host-1-1.*stop them"):
        Reshard(client, namespace, 3).run(time.time())
    WorkerRegistry(client, Keys(namespace)).leave("host-1-1")
    client.set(Keys(namespace).layout, b'{"shards": 1, "counters": 1, "moving_to": 3}')
    with pytest.raises(SettingsError, match="being moved to 3 shards"):
        layout.resolve(client, namespace, None)
    with pytest.raises(SettingsError, match="to 3 shards is unfinished"):
        Reshard(client, namespace, 5).run(time.time())
    assert Reshard(client, namespace, 3).run(time.time())["to"] == 3
    assert layout.resolve(client, namespace, None).shards == 3


def test_the_command_killed_mid_move_finishes_exactly_when_run_again(client, namespace, settings, test_env):
    hs = hashes(6000, "kill")
    crawl_in_every_state(client, Keys(namespace), settings, hs)
    now = T + settings.lease_seconds + 30
    before = snapshot(client, Keys(namespace), hs, now)
    env = dict(test_env)
    killed_mid_move = False
    for pause in (0.0, 0.1, 0.2):
        p = subprocess.Popen([sys.executable, "-m", "crawler", "reshard", "--shards", "6"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and p.poll() is None:  # until the move has begun
            record = layout.read(client, Keys(namespace))
            if record and record.get("moving_to") == 6:
                break
            time.sleep(0.005)
        time.sleep(pause)
        p.send_signal(signal.SIGKILL)
        p.wait()
        record = layout.read(client, Keys(namespace))
        if record.get("moving_to") is None and record["shards"] == 6:
            break
        killed_mid_move = True
    assert killed_mid_move, "no kill landed inside the move: the test proved nothing"
    p = run(env, "status")
    assert p.returncode == 2 and "being moved to 6 shards" in p.stderr and "Traceback" not in p.stderr
    _, result = run_json(env, "reshard", "--shards", "6", timeout=300)
    assert result["to"] == 6
    assert snapshot(client, layout.resolve(client, namespace, None), hs, now) == before


def test_a_single_node_crawl_moves_onto_the_cluster_layout(cluster_ns, settings):  # noqa: F811
    from crawler.store import connect as store

    ns, url = cluster_ns
    s = settings.replace(redis_url=url, namespace=ns, secret=SECRET)
    client = store.connect(s)
    hs = hashes(200, "cl")
    crawl_in_every_state(client, Keys(ns), s, hs)
    now = T + s.lease_seconds + 30
    before = snapshot(client, Keys(ns), hs, now)
    assert Reshard(client, ns, 6).run(now)["moved"] == 200
    assert snapshot(client, layout.resolve(client, ns, None), hs, now) == before
    client.close()
