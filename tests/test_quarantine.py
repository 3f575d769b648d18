"""Poison torrents (contract §1): a torrent whose lease expired K
times in a row without a completion is quarantined with its last error, until
``add --readmit``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from crawler.bencode import codec as bencode
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.torrents.items import NewItem
from tests.cli import run, run_json

ROOT = str(Path(__file__).resolve().parent.parent)


def h(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


# --- the queue ---------------------------------------------------------------

@pytest.fixture
def q(client, namespace, settings):
    return Queue(client, Keys(namespace), settings.replace(quarantine_after=3, lease_seconds=10))


def expire(q, lease, now):
    """Let ``lease`` lapse: the next housekeeping after its deadline sees it."""
    return now + q.settings.lease_seconds + 1


def test_k_expiries_in_a_row_quarantine_with_score_and_last_error_kept(q, client, namespace):
    view = QueueView(q.client, q.keys)
    keys = Keys(namespace)
    t, other = h("poison"), h("fine")
    q.add([NewItem(t), NewItem(other)], now=0.0)
    now = 1.0
    # One full visit (score 1.2), then a failed one that leaves its error on the torrent.
    leases = {x.info_hash: x for x in q.claim(2, now=now)}
    q.complete(leases[t], Outcome.FULL, now=now, due=now)
    q.complete(leases[other], Outcome.FULL, now=now, due=now + 10_000)
    (lease,) = q.claim(1, now=now)
    assert q.fail(lease, "udp://x: timed out", now=now, due=now)
    for k in (1, 2, 3):
        (lease,) = q.claim(1, now=now)
        assert lease.info_hash == t
        now = expire(q, lease, now)
        q.housekeep(now=now)
        if k < 3:
            assert view.state(t) == ("ready", 1.2)
            assert client.hget(keys.expiries, t) == str(k).encode()
    assert view.state(t) == ("quarantined", 1.2)
    assert q.claim(5, now=now) == []  # not handed out any more
    c = view.counts(now=now)
    assert c["quarantined"] == 1 and c["tracked"] == 2 and c["ready"] == 0
    info = view.torrent(t, now=now)
    assert info["state"] == "quarantined" and info["last_error"] == "udp://x: timed out"
    assert info["quarantine"]["expiries"] == 3
    assert info["quarantine"]["message"] == ("lease expired 3 times in a row without a completion; "
                                             "last error: udp://x: timed out")
    # add without --readmit leaves it (its trackers merged); with it, it is due at once, score kept.
    assert q.add([NewItem(t, ("udp://new.example:1/announce",))], now=now) == ["skipped_quarantined"]
    assert view.state(t)[0] == "quarantined"
    assert q.add([NewItem(t), NewItem(t)], readmit=True, now=now) == ["readmitted", "already_tracked"]
    assert view.state(t, now=now) == ("ready", 1.2)
    assert client.zcard(keys.quarantined) == 0 and client.hget(keys.expiries, t) is None
    (lease,) = q.claim(1, now=now)
    assert lease.info_hash == t and lease.score == 1.2
    assert view.torrent(t, now=now)["trackers"] == ["udp://new.example:1/announce"]


@pytest.mark.parametrize("settle", ["complete", "fail", "defer"])
def test_a_visit_that_comes_back_ends_the_streak(q, client, namespace, settle):
    view = QueueView(q.client, q.keys)
    t = h("streak")
    q.add([NewItem(t)], now=0.0)
    now = 1.0
    for _ in range(2):
        (lease,) = q.claim(1, now=now)
        now = expire(q, lease, now)
    (lease,) = q.claim(1, now=now)  # its housekeeping counted the second expiry
    assert client.hget(Keys(namespace).expiries, t) == b"2"
    if settle == "complete":
        q.complete(lease, Outcome.SOME, now=now, due=now)
    elif settle == "fail":
        q.fail(lease, "no answer", now=now, due=now)
    else:
        q.defer(lease, now)
    assert client.hget(Keys(namespace).expiries, t) is None
    for _ in range(2):  # two more expiries: 2 in a row, not 4
        (lease,) = q.claim(1, now=now)
        now = expire(q, lease, now)
    q.housekeep(now=now)
    assert view.state(t, now=now)[0] == "ready"


def test_release_neither_counts_nor_ends_a_streak(q, client, namespace):
    t = h("released")
    q.add([NewItem(t)], now=0.0)
    now = 1.0
    (lease,) = q.claim(1, now=now)
    now = expire(q, lease, now)
    (lease,) = q.claim(1, now=now)
    assert q.release(lease, now=now)
    assert client.hget(Keys(namespace).expiries, t) == b"1"


@pytest.mark.interpreted
def test_a_visit_that_crashes_its_runner_leaves_its_error_for_the_quarantine(client, namespace, settings):
    from workers.process import Process

    keys = Keys(namespace)
    s = settings.replace(quarantine_after=1, lease_seconds=1.0)
    t = h("crashes")
    Queue(client, keys, s).add([NewItem(t)])
    p = Process(s, client, keys, concurrency=1, max_visits=1, flush=False)

    def crash(leases, claim=None, split=None):  # a bug in the visit, as a corrupt database once caused
        raise RuntimeError("boom")

    p.worker.visitor.visit_many = crash
    assert p.run(signals=False) == 0
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    time.sleep(1.1)
    q.housekeep()
    info = view.torrent(t)
    assert info["state"] == "quarantined"
    assert info["quarantine"]["message"] == ("lease expired 1 time in a row without a completion; "
                                             "last error: visit crashed: RuntimeError: boom")


# --- end to end: a tracker that stalls on one torrent, real workers ---------

class StallingTracker:
    """An HTTP tracker on loopback: answers every torrent at once but ``poison``.

    For ``poison`` the first announce is refused with HTTP 503 (a failed visit,
    so the torrent has a last error), and every later one stalls until the
    tracker closes: the visit outlives whatever holds its lease. Scrapes
    (BEP 48) report one seeder and one leecher for every torrent asked, so
    that every visit goes on to announce.
    """

    def __init__(self, poison: str):
        self.poison = poison
        self.poison_asks = 0
        self.asked: dict[str, int] = {}
        self.closing = threading.Event()
        self.lock = threading.Lock()
        tracker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                parts = urllib.parse.urlsplit(self.path)
                asked = urllib.parse.parse_qs(parts.query, encoding="latin-1")["info_hash"]
                if parts.path.endswith("/scrape"):
                    files = {raw.encode("latin-1"): {b"complete": 1, b"incomplete": 1, b"downloaded": 0}
                             for raw in asked}
                    return self.reply(bencode.encode({b"files": files}))
                ih = asked[0].encode("latin-1").hex()
                with tracker.lock:
                    tracker.asked[ih] = tracker.asked.get(ih, 0) + 1
                    n = tracker.asked[ih]
                if ih == tracker.poison:
                    tracker.poison_asks = n
                    if n == 1:
                        self.send_response(503)
                        self.end_headers()
                        return
                    tracker.closing.wait(120)
                    return
                self.reply(bencode.encode({b"interval": 3600, b"complete": 1, b"incomplete": 1,
                                           b"peers": bytes([127, 9, 0, 1, 4, 87])}))

            def reply(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/announce"

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_a_torrent_whose_visit_outlives_its_worker_k_times_is_quarantined(test_env):
    k = 3
    poison = h("poison")
    good = [h(f"good {i}") for i in range(5)]
    tracker = StallingTracker(poison)
    env = dict(test_env, PYTHONPATH=ROOT + os.pathsep + test_env.get("PYTHONPATH", ""),
               PEERCRAWL_TRACKERS=tracker.url, PEERCRAWL_QUARANTINE_AFTER=str(k),
               PEERCRAWL_LEASE_SECONDS="1", PEERCRAWL_VISIT_DEADLINE="60", PEERCRAWL_HTTP_TIMEOUT="60",
               PEERCRAWL_RETRY_SECONDS="0.5", PEERCRAWL_REVISIT_SECONDS="3600")
    workers: list[subprocess.Popen] = []
    try:
        p, out = run_json(env, "add", poison, *good)
        assert out["added"] == 6, p.stderr
        # Each round: a fresh worker visits until the poison torrent's announce
        # stalls, and is then killed outright with the visit in flight.
        for i in range(k):
            w = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--concurrency", "8"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            workers.append(w)
            wait_for(lambda i=i: tracker.poison_asks >= i + 2, 60, f"stalled announce {i + 1}")
            w.kill()
            w.wait(10)
        time.sleep(1.2)  # the last lease lapses
        w = run(env, "worker", "--until-idle", "--concurrency", "8", timeout=60)
        assert w.returncode == 0, w.stderr[-2000:]
        assert tracker.poison_asks == k + 1  # the refusal, then k stalls: never asked again

        p, info = run_json(env, "torrent", poison)
        assert info["state"] == "quarantined", info
        assert info["quarantine"]["expiries"] == k
        assert info["last_error"] and "503" in info["last_error"], info
        assert info["quarantine"]["message"].startswith(f"lease expired {k} times in a row without a completion; "
                                                        "last error: ")
        assert info["failed_visits"] == 1 and info["visits"] == 0
        for x in good:
            p, g = run_json(env, "torrent", x)
            # visited once (a worker killed mid-visit may have asked once more)
            assert g["state"] == "cooling" and g["visits"] == 1, g
        text = run(env, "torrent", poison).stdout
        assert "quarantine" in text and f"lease expired {k} times in a row" in text and "--readmit" in text
        p, st = run_json(env, "status")
        assert st["quarantined"] == 1 and st["tracked"] == 6 and st["cooling"] == 5, st
        assert st["quarantined_torrents"][0]["info_hash"] == poison
        text = run(env, "status").stdout
        assert "quarantined" in text and poison in text

        p, out = run_json(env, "add", "--readmit", poison)
        assert out["readmitted"] == 1, out
        p, info = run_json(env, "torrent", poison)
        assert info["state"] == "ready" and info["score"] == 1.0
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(10)
        tracker.close()


def test_a_random_walk_with_expiries_and_readmits_keeps_every_torrent_in_one_state(client, namespace, settings):
    import random

    keys = Keys(namespace)
    s = settings.replace(quarantine_after=2, lease_seconds=30)
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    rnd = random.Random(11)
    hs = [h(f"walk {i}") for i in range(15)]
    t, held, added, quarantined_seen = 1000.0, [], set(), 0
    for _ in range(500):
        t += rnd.choice([0.5, 5, 40])
        op = rnd.random()
        if op < 0.15:
            x = rnd.choice(hs)
            q.add([NewItem(x)], readmit=rnd.random() < 0.5, now=t)
            added.add(x)
        elif op < 0.5:
            held += q.claim(rnd.randint(1, 4), now=t)
        elif held:
            lease = held.pop(rnd.randrange(len(held)))
            action = rnd.choice(["complete", "fail", "defer", "release", "drop", "drop", "drop"])
            if action == "complete":
                q.complete(lease, rnd.choice(list(Outcome)), now=t, due=t + rnd.choice([1, 100]))
            elif action == "fail":
                q.fail(lease, "no answer", now=t, due=t + 10)
            elif action == "defer":
                q.defer(lease, t + 10)
            elif action == "release":
                q.release(lease, now=t)
            # drop: the worker died; the lease expires
        where: dict[str, list[str]] = {}
        for state in ("ready", "cooling", "leases", "evicted", "quarantined"):
            for m in client.zrange(getattr(keys, state), 0, -1):
                where.setdefault(m.decode(), []).append(state)
        assert all(len(v) == 1 for v in where.values()), where
        assert set(where) == added  # tombstones are kept 30 days: nothing forgotten here
        quarantined = {m for m, v in where.items() if v == ["quarantined"]}
        quarantined_seen += len(quarantined)
        for m in quarantined:
            assert client.hexists(keys.held, m) and client.hexists(keys.quarantine, m)
        assert view.counts(now=t)["tracked"] == sum(1 for v in where.values() if v != ["evicted"])
    assert quarantined_seen  # the walk did reach the state
