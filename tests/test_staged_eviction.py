"""Staged eviction (contract §1; torrents that never had a peer get a grace): never-seen and lost-peers torrents on their own schedules,
pinned ones never, the torrents at risk in ``status``."""

from __future__ import annotations

import datetime
import hashlib
import json
import time

import pytest

from crawler.queue.pins import Pins
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.store import layout
from crawler.torrents.items import NewItem
from tests.cli import run, run_json

DAY = 86400.0
T0 = 1_900_000_000.0


def h(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


class Crawl:
    """One torrent visited by hand at chosen times (claim, then complete)."""

    def __init__(self, client, keys, settings, name: str):
        self.q = Queue(client, keys, settings)
        self.view = QueueView(client, keys)
        self.h = h(name)
        assert self.q.add([NewItem(self.h)]) == ["added"]

    def visit(self, at: float, outcome: Outcome = Outcome.NONE, peers: int = 0) -> str:
        leases = [x for x in self.q.claim(5, now=at) if x.info_hash == self.h]
        assert len(leases) == 1, f"not ready at {at}"
        state, _ = self.q.complete(leases[0], outcome, peers=peers, due=at + 1800, now=at)
        return state

    def empty_until(self, start: float, end: float) -> tuple[float, str]:
        """Visits without peers every 1800 s from ``start`` while it stays tracked, up to ``end``."""
        at, state = start, "cooling"
        while at <= end and state == "cooling":
            state = self.visit(at)
            at += 1800
        return at - 1800, state

    def tombstone(self) -> dict:
        return self.view.torrent(self.h, T0)["tombstone"] if self.view.state(self.h)[0] == "evicted" else {}


@pytest.fixture
def staged(settings):
    return settings.replace(evict_never_seen_seconds=DAY, evict_lost_seconds=7 * DAY)


def test_a_torrent_never_seen_with_a_peer_goes_a_day_after_its_first_visit(client, keys, staged):
    c = Crawl(client, keys, staged, "never")
    at, state = c.empty_until(T0, T0 + DAY - 1)
    assert state == "cooling"  # 48 visits without peers, held at the threshold for the day
    info = c.view.torrent(c.h, at)
    assert info["score"] == pytest.approx(staged.evict_below) and info["first_visit"] == T0
    assert info["at_risk_from"] == T0 + DAY
    assert c.view.at_risk(at)["at_risk"] == 0 and c.view.at_risk(at)["at_risk_later"] == 1
    assert c.view.at_risk(T0 + DAY)["at_risk_torrents"] == [
        {"info_hash": c.h, "since": T0 + DAY, "stage": "never had peers", "last_peers": None}]
    assert c.visit(T0 + DAY) == "evicted"
    tomb = c.tombstone()
    assert tomb["reason"] == "never had peers" and tomb["last_peers"] is None and tomb["at"] == T0 + DAY
    assert c.view.at_risk(T0 + DAY)["at_risk_later"] == 0


def test_a_torrent_that_lost_its_peers_goes_a_week_after_the_last_one(client, keys, staged):
    c = Crawl(client, keys, staged, "lost")
    assert c.visit(T0, Outcome.SOME, peers=3) == "cooling"
    at, state = c.empty_until(T0 + 1800, T0 + 7 * DAY - 1)
    assert state == "cooling" and at > T0 + DAY  # past the never-seen grace: its stage is its own
    assert c.view.torrent(c.h, at)["last_peers"] == T0
    assert c.view.at_risk(T0 + 7 * DAY)["at_risk_torrents"][0]["stage"] == "lost its peers"
    assert c.visit(T0 + 7 * DAY) == "evicted"
    tomb = c.tombstone()
    assert tomb["reason"] == "lost its peers" and tomb["last_peers"] == T0


def test_peers_seen_again_start_the_week_again(client, keys, staged):
    c = Crawl(client, keys, staged, "back")
    c.visit(T0, Outcome.SOME, peers=1)
    c.empty_until(T0 + 1800, T0 + 3 * DAY)
    c.visit(T0 + 3 * DAY + 1800, Outcome.SOME, peers=2)
    at, state = c.empty_until(T0 + 3 * DAY + 3600, T0 + 11 * DAY)
    assert state == "evicted" and at >= T0 + 3 * DAY + 1800 + 7 * DAY
    assert c.tombstone()["last_peers"] == T0 + 3 * DAY + 1800


def test_a_pinned_torrent_is_never_evicted_and_never_at_risk(client, keys, staged):
    c = Crawl(client, keys, staged, "pinned")
    assert Pins(client, keys).pin(c.h) == "pinned"
    at, state = c.empty_until(T0, T0 + 3 * DAY)
    assert state == "cooling" and at >= T0 + 3 * DAY - 1800
    for _ in range(30):  # and a visit with peers that would bring it below the threshold
        at += 1800
        assert c.visit(at, Outcome.SOME, peers=1) == "cooling"
    assert c.view.at_risk(at)["at_risk"] + c.view.at_risk(at)["at_risk_later"] == 0
    assert c.view.torrent(c.h, at)["pinned"] == "forever"


def test_a_pin_until_a_date_ends_then(client, keys, staged):
    c = Crawl(client, keys, staged, "until")
    Pins(client, keys).pin(c.h, until=T0 + 2 * DAY)
    at, state = c.empty_until(T0, T0 + 2 * DAY - 1)
    assert state == "cooling"
    assert c.visit(T0 + 2 * DAY) == "evicted"  # the never-seen day had run long before
    assert c.tombstone()["reason"] == "never had peers"


def test_unpinned_it_comes_back_at_risk_with_its_next_visit(client, keys, staged):
    c = Crawl(client, keys, staged, "unpin")
    pins = Pins(client, keys)
    pins.pin(c.h)
    c.empty_until(T0, T0 + 12 * 1800)
    assert c.view.at_risk(T0)["at_risk_later"] == 0
    assert pins.unpin(c.h) == "unpinned"
    c.visit(T0 + 13 * 1800)
    assert c.view.at_risk(T0 + DAY)["at_risk"] == 1


def test_a_visit_with_peers_below_the_threshold_is_a_low_score(client, keys, settings):
    c = Crawl(client, keys, settings.replace(evict_below=0.5), "low")
    assert c.visit(T0, Outcome.SOME, peers=1) == "cooling"  # 0.8
    assert c.visit(T0 + 1800, Outcome.SOME, peers=1) == "cooling"  # 0.64
    assert c.visit(T0 + 3600, Outcome.SOME, peers=1) == "cooling"  # 0.512
    assert c.visit(T0 + 5400, Outcome.SOME, peers=1) == "evicted"  # 0.4096
    assert c.tombstone()["reason"] == "low score"


def test_zero_grace_is_the_score_alone(client, keys, settings):
    c = Crawl(client, keys, settings.replace(evict_never_seen_seconds=0.0), "zero")
    at, state = c.empty_until(T0, T0 + DAY)
    assert state == "evicted" and at == T0 + 7 * 1800  # the eighth visit: 0.5^8 < 0.005


def test_pins_need_a_tracked_torrent(client, keys, staged):
    c = Crawl(client, keys, staged.replace(evict_never_seen_seconds=0.0), "gone")
    c.empty_until(T0, T0 + DAY)
    pins = Pins(client, keys)
    assert pins.pin(c.h) == "evicted" and pins.unpin(c.h) == "evicted"
    assert pins.pin(h("never added")) == "untracked"


def test_the_commands_pin_unpin_and_list_the_torrents_at_risk(client, namespace, test_env, staged):
    keys = layout.resolve(client, namespace, None)
    # no grace, so that by the real clock the commands read its next visit without peers evicts it
    c = Crawl(client, keys, staged.replace(evict_never_seen_seconds=0.0), "cli")
    start = time.time()
    c.empty_until(start, start + 6 * 1800)  # seven visits: 0.5^7 is above the threshold, 0.5^8 not
    p, status = run_json(test_env, "status")
    assert p.returncode == 0, p.stderr
    assert status["at_risk"] == 1 and status["at_risk_torrents"][0]["info_hash"] == c.h
    assert "at risk:" in run(test_env, "status").stdout
    p, info = run_json(test_env, "torrent", c.h, "--pin", "--until", "2099-01-31")
    assert p.returncode == 0, p.stderr
    until = datetime.datetime(2099, 1, 31, tzinfo=datetime.UTC).timestamp()
    assert info["pinned"] == until and info["at_risk_from"] is None
    assert run_json(test_env, "status")[1]["at_risk"] == 0
    p, info = run_json(test_env, "torrent", c.h, "--unpin")
    assert p.returncode == 0 and info["pinned"] is None
    for args, message in ((["--until", "2099-01-31"], "--until goes with --pin"),
                          (["--pin", "--unpin"], "exclude each other"),
                          (["--pin", "--until", "2001-01-01"], "2001-01-01 has passed"),
                          (["--pin", "--until", "soon"], "'soon' is not a date")):
        p = run(test_env, "torrent", c.h, *args)
        assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr
    p = run(test_env, "torrent", h("never added"), "--pin")
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0 and "is not tracked" in p.stderr
    json.loads(run(test_env, "torrent", c.h, "--json").stdout)


def test_the_longest_graces_keep_a_torrent_ten_years(client, keys, settings):
    ten_years = 3650 * DAY
    c = Crawl(client, keys, settings.replace(evict_never_seen_seconds=ten_years, evict_lost_seconds=ten_years), "long")
    c.empty_until(T0, T0 + 20 * 1800)
    assert c.visit(T0 + ten_years - 1) == "cooling"
    assert c.visit(T0 + ten_years + 1800) == "evicted"
