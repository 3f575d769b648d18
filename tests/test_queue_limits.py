"""Every queue script at the largest value a setting or flag allows (contract §1).

A script that fails halfway keeps its earlier writes (Redis does not roll a
script back), so each one reads and sizes everything before its first write
and slices every ``unpack``. These tests drive each at its largest sizes and
check that no torrent is lost or doubled: every tracked torrent is in exactly
one state, and the count of tracked torrents is what was added.
"""

from __future__ import annotations

import time

import pytest

from crawler.keys import Keys
from crawler.queue import script_calls
from crawler.queue.queue import MAX_CLAIM, Completion, Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.store import scripts
from crawler.torrents.items import NewItem
from tests.cli import run, run_json

STATES = ("ready", "cooling", "leases", "evicted", "quarantined")


def hashes(n: int, salt: int = 0) -> list[str]:
    return ["%040x" % (i * 2654435761 + salt) for i in range(1, n + 1)]


def membership(client, keys: Keys) -> dict[str, list[str]]:
    """info-hash -> the state sets it is a member of."""
    out: dict[str, list[str]] = {}
    for state in STATES:
        for h in client.zrange(getattr(keys, state), 0, -1):
            out.setdefault(h.decode(), []).append(state)
    return out


def queue_scripts(client) -> tuple:
    """add.lua, claim.lua and complete.lua as Redis runs them, for calls past the clamps of the
    ``Queue`` methods (the KEYS and ARGV still come from the queue's own builders)."""
    return tuple(scripts.register(client, name, "crawler.queue") for name in ("add", "claim", "complete"))


def assert_conserved(client, keys: Keys, expected: set[str]) -> None:
    where = membership(client, keys)
    doubled = {h: s for h, s in where.items() if len(s) > 1}
    assert not doubled, f"in two states at once: {list(doubled.items())[:3]}"
    assert set(where) == expected, f"lost {len(expected - set(where))}, unexpected {len(set(where) - expected)}"


# --- black box: the reproduced loss -----------------------------------------

@pytest.mark.timeout(300)
def test_worker_concurrency_2500_on_6000_torrents_loses_nothing(test_env, tmp_path):
    n = 6000
    f = tmp_path / "hashes.txt"
    f.write_text("\n".join(hashes(n)) + "\n")
    p, out = run_json(test_env, "add", "--from", str(f))
    assert p.returncode == 0, p.stderr
    assert out["added"] == n
    # No trackers, DHT off: each visit has nothing to ask and goes to cooling.
    w = run(test_env, "worker", "--concurrency", "2500", "--until-idle", timeout=240)
    assert w.returncode == 0, w.stderr[-2000:]
    assert "claim_failed" not in w.stderr, [x for x in w.stderr.splitlines() if "claim_failed" in x][:1]
    p, st = run_json(test_env, "status")
    assert p.returncode == 0, p.stderr
    assert st["tracked"] == n
    assert st["ready"] + st["cooling"] + st["in_flight"] + st["quarantined"] == n
    assert st["cooling"] == n, st  # every one was claimed and deferred


# --- add: a batch holding a magnet with 8,000 tr= after an evicted torrent ---

def test_readmit_batch_with_an_8000_tracker_magnet_after_an_evicted_torrent(test_env, tmp_path, client,
                                                                            namespace, settings):
    keys = Keys(namespace)
    q = Queue(client, keys, settings)
    view = QueueView(q.client, q.keys)
    evicted, big, good = hashes(3, salt=7)
    q.add([NewItem(evicted, ("udp://kept.example:1/announce",))])
    for _ in range(8):
        (lease,) = q.claim(1)
        q.complete(lease, Outcome.NONE, due=0)
    assert view.state(evicted)[0] == "evicted"
    magnet = f"magnet:?xt=urn:btih:{big}&" + "&".join(f"tr=udp://t{i}.example:6969/announce" for i in range(8000))
    f = tmp_path / "list.txt"
    f.write_text(f"{evicted}\n{magnet}\n{good}\n")
    env = dict(test_env, PEERCRAWL_MAX_TRACKERS_PER_TORRENT="64")
    p, out = run_json(env, "add", "--readmit", "--from", str(f), timeout=120)
    assert p.returncode == 0, p.stderr
    assert out["added"] == 3 and out["invalid"] == 0, out
    assert out["trackers_dropped"] == 8000 - 64, out
    for h in (evicted, big, good):
        assert view.state(h) == ("ready", 1.0), h
    assert client.scard(keys.trackers(big)) == 64
    assert view.torrent(evicted)["trackers"] == ["udp://kept.example:1/announce"]
    assert client.ttl(keys.trackers(evicted)) == -1  # the eviction's expiry was lifted
    assert_conserved(client, keys, {evicted, big, good})
    p = run(env, "add", big, "--tracker", "udp://one-more.example:1/announce")
    assert p.returncode == 0
    assert "1 tracker not stored" in p.stderr and "PEERCRAWL_MAX_TRACKERS_PER_TORRENT" in p.stderr, p.stderr
    assert client.scard(keys.trackers(big)) == 64


# --- every script at the largest values settings and flags allow -----------

CONCURRENCY_MAX = 10_000    # PEERCRAWL_CONCURRENCY / --concurrency bound
TRACKERS_MAX = 10_000       # PEERCRAWL_MAX_TRACKERS_PER_TORRENT bound


@pytest.mark.timeout(300)
def test_every_queue_script_at_its_largest_values_conserves_every_torrent(client, namespace, settings):
    keys = Keys(namespace)
    s = settings.replace(max_trackers_per_torrent=TRACKERS_MAX, quarantine_after=2, evict_below=0.9)
    q = Queue(client, keys, s)
    add_lua, claim_lua, _ = queue_scripts(client)
    view = QueueView(q.client, q.keys)
    n = 2 * CONCURRENCY_MAX + 8
    hs = hashes(n, salt=11)
    everyone = set(hs)
    big = [f"udp://t{i}.example:6969/announce" for i in range(TRACKERS_MAX + 500)]

    # add: the stream asked for batches past ADD_BATCH, with --readmit (every
    # item then brings its two keys), one item at the tracker bound and past it.
    dropped: list[int] = []
    items = [NewItem(hs[0], tuple(big))] + [NewItem(h, (big[i % 50],)) for i, h in enumerate(hs[1:], 1)]
    statuses = [st for _, st in q.add_stream(items, readmit=True, batch=10**6, pipeline=10**6,
                                             on_dropped=lambda item, k: dropped.append(k))]
    assert statuses == ["added"] * n
    assert dropped == [500] and client.scard(keys.trackers(hs[0])) == TRACKERS_MAX
    assert_conserved(client, keys, everyone)

    # add.lua itself, past the Python batch: every item again in one call.
    k, a, _ = q.admission._add_args(q.keys, [NewItem(h, (big[0],)) for h in hs], True, 1.0)
    letters, lost = add_lua(keys=k, args=a)
    assert letters.decode() == "t" * n and lost == []
    assert_conserved(client, keys, everyone)

    # claim.lua at the largest claim and housekeeping budget: all n due at once.
    now = time.time() + 10
    ca = q._claim_args(CONCURRENCY_MAX, now)
    ca["args"][2], ca["args"][3] = CONCURRENCY_MAX, 2 * CONCURRENCY_MAX + 8
    flat = claim_lua(**ca)
    assert len(flat) == 4 * CONCURRENCY_MAX + 1  # and the shard's offer
    assert client.zcard(keys.leases) == CONCURRENCY_MAX and client.zcard(keys.ready) == n - CONCURRENCY_MAX
    assert_conserved(client, keys, everyone)

    # The Python side clamps what it asks for.
    assert len(q.claim(CONCURRENCY_MAX, now=now)) == MAX_CLAIM
    assert_conserved(client, keys, everyone)

    # 12,000 leases expire together, twice in a row: quarantine in one housekeeping pass.
    later = now + s.lease_seconds + 1
    ca = q._claim_args(0, later)
    ca["args"][3] = 2 * CONCURRENCY_MAX + 8
    claim_lua(**ca)
    assert client.zcard(keys.leases) == 0 and client.zcard(keys.ready) == n
    assert_conserved(client, keys, everyone)
    ca = q._claim_args(CONCURRENCY_MAX, later)
    ca["args"][3] = 2 * CONCURRENCY_MAX + 8
    assert len(claim_lua(**ca)) == 4 * CONCURRENCY_MAX + 1
    ca = q._claim_args(0, later + s.lease_seconds + 1)
    ca["args"][3] = 2 * CONCURRENCY_MAX + 8
    claim_lua(**ca)
    quarantined = {h.decode() for h in client.zrange(keys.quarantined, 0, -1)}
    assert len(quarantined) == CONCURRENCY_MAX
    assert view.counts(now=later)["tracked"] == n
    assert_conserved(client, keys, everyone)

    # Re-admit them all in one add.lua call: back to due, score kept.
    k, a, _ = q.admission._add_args(q.keys, [NewItem(h) for h in sorted(quarantined)], True, later)
    letters, _ = add_lua(keys=k, args=a)
    assert letters.decode() == "q" * CONCURRENCY_MAX
    assert client.zcard(keys.quarantined) == 0 and client.hlen(keys.quarantine) == 0
    assert_conserved(client, keys, everyone)

    # complete (evicting: threshold 0.9), fail, defer, extend, release on a full claim each.
    t = later + 10 * s.lease_seconds
    leases = q.claim(MAX_CLAIM, now=t)
    assert len(leases) == MAX_CLAIM
    for i, lease in enumerate(leases):
        assert q.extend(lease, now=t)
        if i % 4 == 0:
            assert q.complete(lease, Outcome.NONE, now=t)[0] == "evicted"
        elif i % 4 == 1:
            assert q.fail(lease, "x" * 10_000, now=t)
        elif i % 4 == 2:
            assert q.defer(lease, t + 5)
        else:
            assert q.release(lease, now=t)
    assert client.zcard(keys.evicted) == MAX_CLAIM // 4
    assert_conserved(client, keys, everyone)

    # plan.lua on the 10,000-tracker set, at the bound and under it.
    assert len(q.plan(hs[0])[0]) == TRACKERS_MAX
    assert len(Queue(client, keys, s.replace(max_trackers_per_torrent=64)).plan(hs[0])[0]) == 64

    # Re-admit every evicted torrent in one call, each with trackers past the bound.
    evicted = [h.decode() for h in client.zrange(keys.evicted, 0, -1)]
    k, a, _ = q.admission._add_args(q.keys, [NewItem(h, tuple(big[:5])) for h in evicted], True, t)
    letters, _ = add_lua(keys=k, args=a)
    assert letters.decode() == "r" * len(evicted)
    assert client.zcard(keys.evicted) == 0
    assert_conserved(client, keys, everyone)
    assert view.counts(now=t)["tracked"] == n


def test_scripts_refuse_bad_arguments_before_writing(client, namespace, settings):
    keys = Keys(namespace)
    q = Queue(client, keys, settings)
    add_lua, claim_lua, complete_lua = queue_scripts(client)
    (h,) = hashes(1, salt=3)
    q.add([NewItem(h)], now=1.0)
    (lease,) = q.claim(1, now=100.0)
    before = membership(client, keys)
    ca = q._claim_args(1, 100.0)
    ca["args"][2] = "many"
    with pytest.raises(Exception, match="claim.lua: bad arguments"):
        claim_lua(**ca)
    def call(**options) -> dict:  # the complete.lua call of this visit alone
        c = Completion(lease, Outcome.SOME, 100.0, peers=1, **options)
        return script_calls.complete_args(keys.for_torrent(h), q.settings, [c])

    args = call()
    args["args"][0] = "not a number"  # the threshold
    with pytest.raises(Exception, match="complete.lua: bad arguments"):
        complete_lua(**args)
    with pytest.raises(Exception, match="complete.lua: bad arguments"):
        complete_lua(**call(due=float("nan")))
    # the visit's argument count, its coverage, estimate and lanes; then one KEY short of its four
    # and values tonumber reads but a command refuses after writes began (a due time ZADD cannot
    # parse, an infinite time cjson cannot write, counts HINCRBY and EXPIRE cannot take)
    for i, bad in ((6, "9"), (6, "x"), (6, "90"), (18, "-1"), (18, "nan"), (19, "-3"), (19, ""), (20, "x"),
                   (21, "2"), (22, "4"), (22, "1x"), (11, "1e400"), (11, " 5"), (10, "inf"), (14, "1.5"),
                   (19, "1e400"), (18, "2.5"), (1, "1e400"), (1, "30.5")):
        args = call(reported=5, new=2)
        args["args"][i] = bad
        with pytest.raises(Exception, match="complete.lua: bad arguments"):
            complete_lua(**args)
    args = call()
    with pytest.raises(Exception, match="complete.lua: bad arguments"):
        complete_lua(keys=args["keys"][:-1], args=args["args"])
    notes_key = keys.for_torrent(h).tracker_min_interval(h)
    for notes in (["0", "1", "f", "v"], [60, "2", "f", "v"], [60, "x"], [60], ["6e1", "1", "f", "v"],
                  [" 60", "1", "f", "v"]):  # the visit's notes
        with pytest.raises(Exception, match="complete.lua: bad arguments"):
            complete_lua(**call(notes=notes))
    for kept in ("10001", "-1", "2.5"):  # the history's length, refused before the (good) notes are written
        args = call(notes=[60, "1", "f", "v"])
        args["args"][2] = kept
        with pytest.raises(Exception, match="complete.lua: bad arguments"):
            complete_lua(**args)
    # a good visit after a malformed one in the same call: refused with it
    args = call(notes=[60, "1", "f", "v"])
    good = call(notes=[60, "1", "f", "v"])
    args["args"][22] = "9"  # its lanes
    with pytest.raises(Exception, match="complete.lua: bad arguments"):
        complete_lua(keys=args["keys"] + good["keys"][13:], args=args["args"] + good["args"][6:])
    assert not client.exists(notes_key)
    with pytest.raises(Exception, match="defer.lua: bad arguments"):
        q.defer(lease, float("nan"))
    k, a, _ = q.admission._add_args(q.keys, [NewItem(h)], True, 1.0)
    with pytest.raises(Exception, match="add.lua"):
        add_lua(keys=k[:-1], args=a)
    with pytest.raises(Exception, match="add.lua: malformed item"):
        add_lua(keys=k, args=a[:-1] + ["5"])
    client.hset(keys.torrent(h), "visits", "garbage")
    with pytest.raises(Exception, match="complete.lua: a stored score or count"):
        q.complete(lease, Outcome.SOME, now=100.0)
    assert membership(client, keys) == before
    client.hdel(keys.torrent(h), "visits")
    assert q.complete(lease, Outcome.SOME, now=100.0)[0] == "cooling"
    # A stored value the claim depends on is checked before anything moves.
    client.hset(keys.held, h, "garbage")
    before = membership(client, keys)
    with pytest.raises(Exception, match="held score of"):
        q.claim(1, now=10_000.0)
    assert membership(client, keys) == before


# --- trackers per torrent at visit planning ---------------------------------

class CountingTracker:
    """An HTTP tracker on loopback answering every path; it notes the paths asked."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from crawler.bencode import codec as bencode

        self.paths: list[str] = []
        tracker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                tracker.paths.append(self.path.split("?", 1)[0])
                body = bencode.encode({b"interval": 3600, b"peers": bytes([127, 9, 0, 1, 4, 87])})
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/t{i}/announce"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_tracker_set_stored_past_the_bound_is_never_announced_whole(test_env, client, namespace, settings):
    keys = Keys(namespace)
    tracker = CountingTracker()
    try:
        (ih,) = hashes(1, salt=5)
        q = Queue(client, keys, settings)
        view = QueueView(q.client, q.keys)
        q.add([NewItem(ih)])
        # 300 trackers stored before the bound (or under a higher one).
        client.sadd(keys.trackers(ih), *(tracker.url(i) for i in range(300)))
        small = Queue(client, keys, settings.replace(max_trackers_per_torrent=10))
        draws = [set(small.plan(ih)[0]) for _ in range(20)]
        assert all(len(d) == 10 for d in draws)
        assert len(set().union(*draws)) > 10  # a different draw each visit: every tracker gets its turn
        env = dict(test_env, PEERCRAWL_MAX_TRACKERS_PER_TORRENT="10")
        w = run(env, "worker", "--until-idle", "--concurrency", "2", timeout=120)
        assert w.returncode == 0, w.stderr[-2000:]
        # Ten trackers asked, each at its scrape and announce paths (the scrape URL answers as an
        # announce page does: no files dictionary, so the tracker is learned as one that cannot scrape).
        assert len({p.split("/")[1] for p in tracker.paths}) == 10, tracker.paths
        assert view.torrent(ih)["visits"] == 1
    finally:
        tracker.close()
