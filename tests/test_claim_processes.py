"""Many worker processes on one queue, and a claimer killed with SIGKILL."""

import multiprocessing as mp
import os
import signal
import time

import redis

from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.torrents.items import NewItem

N = 400


def claimer(url, settings, out, batch):
    q = Queue(redis.Redis.from_url(url), Keys(settings.namespace), settings)
    got = []
    while True:
        leases = q.claim(batch)
        if not leases:
            break
        for lease in leases:
            state, _ = q.complete(lease, Outcome.SOME, due=time.time() + 3600)
            assert state == "cooling"
            got.append(lease.info_hash)
    out.put(got)


def test_many_processes_claim_each_torrent_once_per_round(redis_url, client, keys, settings):
    q = Queue(client, keys, settings)
    view = QueueView(q.client, q.keys)
    hashes = ["%040x" % (5 * 10**9 + i) for i in range(N)]
    assert q.add([NewItem(h) for h in hashes]) == ["added"] * N
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=claimer, args=(redis_url, settings, out, 1 + i % 4)) for i in range(6)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    claimed = [h for r in results for h in r]
    assert sorted(claimed) == sorted(hashes)  # every torrent once, none twice
    assert sum(1 for r in results if r) >= 2  # really shared between processes
    c = view.counts()
    assert (c["ready"], c["cooling"], c["in_flight"], c["tracked"]) == (0, N, 0, N)


def holder(url, settings, ready_fd):
    q = Queue(redis.Redis.from_url(url), Keys(settings.namespace), settings)
    leases = q.claim(50)
    os.write(ready_fd, str(len(leases)).encode())
    time.sleep(600)


def test_killed_claimer_loses_nothing(redis_url, client, keys, settings):
    # The leases run out at a time given to claim, not after a real wait: how
    # long the fork, the kill and the join take does not matter.
    q = Queue(client, keys, settings)
    view = QueueView(q.client, q.keys)
    hashes = ["%040x" % (6 * 10**9 + i) for i in range(50)]
    q.add([NewItem(h) for h in hashes])
    r, w = os.pipe()
    ctx = mp.get_context("fork")
    p = ctx.Process(target=holder, args=(redis_url, settings, w))
    p.start()
    assert os.read(r, 16) == b"50"
    os.kill(p.pid, signal.SIGKILL)
    p.join(timeout=10)
    assert p.exitcode == -signal.SIGKILL
    assert q.claim(50) == []  # still leased to the dead process
    assert view.counts()["in_flight"] == 50
    back = q.claim(100, now=time.time() + settings.lease_seconds + 1)
    assert sorted(l.info_hash for l in back) == sorted(hashes)
    assert all(l.token == 2 and l.score == 1.0 for l in back)
