"""Due now: a cooling torrent made due at once, through ``torrent --due-now`` and ``add --due-now``."""

from __future__ import annotations

import json
import time

from crawler.keys import Keys
from crawler.queue.due_now import DueNow
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.torrents.items import NewItem
from tests.cli import run

FAILED, HIGH, SEEN = "d1" * 20, "d2" * 20, "d3" * 20


def test_a_failed_torrent_is_claimed_at_once_with_its_score_and_lane_kept(client, namespace, settings, test_env):
    q = Queue(client, Keys(namespace), settings)
    view = QueueView(client, Keys(namespace))
    now = time.time()
    q.add([NewItem(FAILED)], now=now)
    q.add([NewItem(HIGH)], now=now, lane="high")
    leases = {x.info_hash: x for x in q.claim(2, now=now)}
    assert q.fail(leases[FAILED], "udp://x: refused", now=now)  # due again after the retry delay
    q.complete(leases[HIGH], Outcome.FULL, now=now, due=now + 3600)
    assert q.claim(2, now=now + 1) == []
    before = {h: view.state(h, now + 1) for h in (FAILED, HIGH)}
    assert [x[0] for x in before.values()] == ["cooling", "cooling"]

    for h in (FAILED, HIGH):
        r = run(test_env, "torrent", h, "--due-now", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["state"] == "ready"  # due: the next claim takes it
    claimed = {x.info_hash: x for x in q.claim(2, now=time.time())}
    assert set(claimed) == {FAILED, HIGH}
    assert {h: x.score for h, x in claimed.items()} == {h: s for h, (_, s) in before.items()}
    assert claimed[HIGH].lane == "high"


def test_what_is_not_cooling_is_left_as_it_is(client, namespace, settings, test_env):
    q = Queue(client, Keys(namespace), settings)
    due = DueNow(client, Keys(namespace))
    now = time.time()
    q.add([NewItem(FAILED), NewItem(SEEN)], now=now)
    assert due.make_due(FAILED, now) == "ready"
    (lease,) = q.claim(1, now=now)
    assert due.make_due(lease.info_hash, now) == "in_flight"
    assert due.make_due("ab" * 20, now) == "untracked"
    r = run(test_env, "torrent", "ab" * 20, "--due-now")
    assert r.returncode == 1 and r.stderr.strip().endswith("is not tracked; nothing made due")
    assert "Traceback" not in r.stderr


def test_add_due_now_makes_tracked_cooling_torrents_due(client, namespace, settings, test_env):
    q = Queue(client, Keys(namespace), settings)
    now = time.time()
    q.add([NewItem(SEEN)], now=now)
    (lease,) = q.claim(1, now=now)
    q.complete(lease, Outcome.SOME, now=now, due=now + 1800)
    r = run(test_env, "add", SEEN, FAILED, "--due-now", "--json")
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)
    assert (counts["added"], counts["already_tracked"], counts["made_due"]) == (1, 1, 1)
    assert {x.info_hash for x in q.claim(5, now=time.time())} == {SEEN, FAILED}
    plain = run(test_env, "add", SEEN, "--due-now")
    assert plain.returncode == 0 and plain.stdout.strip().endswith("made due now 0"), plain.stdout
