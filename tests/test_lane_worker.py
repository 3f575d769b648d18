"""Lanes served in order by the real worker (contract §1 lanes): ``peercrawl`` subprocesses against a
real opentracker and the test Redis.

40 torrents are added to the low lane (1,200 over 4 queue shards: more per
shard than a claim's look at a shard moves), then 5 to the high lane, and a
worker visits 8 of them. The high lane is smaller than one claim; its torrents were
added after the low ones, so they wait behind them in any queue kept in
arrival order. The low lane is owed a tenth of the claims while the high
lane has ready torrents (``PEERCRAWL_LANE_SHARE``), less than one of 8:
every high torrent must be visited, and the low ones only once none is left.
The same holds for torrents moved to the high lane while they cool, due
after 40 low ones.
"""

from __future__ import annotations

import time

import pytest

from crawler.keys import Keys
from tests.cli import run, run_json, torrent_infos
from tests.opentracker import opentracker  # noqa: F401 (fixture)

HIGH = [f"{0xfff00 + i:040x}" for i in range(5)]


@pytest.mark.parametrize(("shards", "low"), [(1, 40), (4, 1200)])
@pytest.mark.parametrize("concurrency", [1, 8, 64])
def test_a_worker_visits_a_small_high_lane_before_the_low_lane_it_was_added_after(
        test_env, opentracker, tmp_path, concurrency, shards, low):  # noqa: F811 (fixture)
    lows = [f"{i:040x}" for i in range(low)]
    ot = opentracker(lows + HIGH)  # tracked, with empty swarms: every visit finds no peer
    env = dict(test_env, PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_QUEUE_SHARDS=str(shards))
    (tmp_path / "low.txt").write_text("\n".join(lows) + "\n")
    p, out = run_json(env, "add", "--lane", "low", "--from", str(tmp_path / "low.txt"))
    assert p.returncode == 0 and out["added"] == low, p.stderr
    p, out = run_json(env, "add", "--lane", "high", *HIGH)
    assert p.returncode == 0 and out["added"] == 5, p.stderr
    w = run(env, "worker", "--max-visits", "8", "--concurrency", str(concurrency), timeout=120)
    assert w.returncode == 0, w.stderr[-2000:]
    p, status = run_json(env, "status")
    assert p.returncode == 0, p.stderr
    lanes = status["lanes"]
    # every high torrent visited (each now cooling), then the low lane with the rest
    assert (lanes["high"]["ready"], lanes["high"]["cooling"]) == (0, 5), lanes
    assert (lanes["low"]["ready"], lanes["low"]["cooling"]) == (low - 3, 3), lanes
    for t in torrent_infos(env, HIGH).values():
        assert t["visits"] == 1 and t["peers_last_visit"] == 0, t


# One concurrency: the claim sizes 1, 8 and 64 of torrents falling due are checked claim by claim
# in tests/test_lane_backlog.py; this is the real worker on that path.
@pytest.mark.parametrize("concurrency", [8])
def test_a_worker_visits_torrents_moved_to_the_high_lane_while_cooling_before_older_due_low_ones(
        test_env, opentracker, client, namespace, concurrency):  # noqa: F811 (fixture)
    lows = [f"{i:040x}" for i in range(45)]
    ot = opentracker(lows)
    env = dict(test_env, PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_REVISIT_SECONDS="2")
    assert run_json(env, "add", "--lane", "low", *lows)[1]["added"] == 45
    w = run(env, "worker", "--until-idle", "--concurrency", "8", timeout=120)
    assert w.returncode == 0, w.stderr[-2000:]
    # the 5 due last move to the high lane while they cool: behind 40 low ones in the due queue
    late = [h.decode() for h in client.zrevrange(Keys(namespace).cooling, 0, 4)]
    assert len(late) == 5
    assert run_json(env, "add", "--lane", "high", *late)[1]["already_tracked"] == 5
    infos = torrent_infos(env, late)
    visits = {h: t["visits"] for h, t in infos.items()}
    time.sleep(max(max(t["due"] or 0 for t in infos.values()) - time.time(), 0) + 0.1)  # every one due again
    env["PEERCRAWL_REVISIT_SECONDS"] = "3600"
    w = run(env, "worker", "--max-visits", "8", "--concurrency", str(concurrency), timeout=120)
    assert w.returncode == 0, w.stderr[-2000:]
    lanes = run_json(env, "status")[1]["lanes"]
    assert (lanes["high"]["ready"], lanes["high"]["cooling"]) == (0, 5), lanes
    assert {h: t["visits"] - 1 for h, t in torrent_infos(env, late).items()} == visits
