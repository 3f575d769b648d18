"""Per-remote-node pacing of DHT queries (crawler/sources/dht/dht_pacing.py).

Two parts:

- The pacer alone (pure, time passed in): its rule, and a randomised
  simulation of traversals that checks the promise itself: no IP ever gets
  more than ``budget`` queries in any ``window``-long interval.
- End to end against a swarm of real libtorrent nodes that keep libtorrent's
  own ban (``dht_block_ratelimit`` 5: an address that sends 50 packets within
  10 s is ignored for 5 minutes). Each swarm node logs every packet it gets
  (``dht_pkt_alert``) and every ban. A burst of 80 lookups through a paced
  DhtSource never sends one node more than 40 packets in any 10 s and finds
  exactly the announced peers; the same burst unpaced gets the crawler
  banned, which is what makes the first half able to fail.
"""

from __future__ import annotations

import datetime
import hashlib
import random
import re
import time
from collections import defaultdict
from dataclasses import dataclass

import gevent
import libtorrent as lt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.settings import Settings, SettingsError
from crawler.sources.dht.dht import DhtSource
from crawler.sources.dht.dht_pacing import Group, NodePacer
from tests.dht_swarm import HASH_A, HASH_B, HASH_C, announced_swarm

# --- the pacer alone -----------------------------------------------------------


def test_budget_is_rate_times_window_and_bounds_running_traversals():
    pacer = NodePacer(rate=4.0, window=10.0)
    assert pacer.budget == 40
    started = 0
    while pacer.ready(0.0):
        pacer.start(Group(0.0))
        started += 1
    # A node nobody queried yet may still get one query from each running
    # traversal: at most budget of them run at a time.
    assert started == 40
    with pytest.raises(ValueError, match="at least 2"):
        NodePacer(rate=0.1, window=10.0)


def test_queries_in_the_window_hold_back_new_lookups_until_they_expire():
    pacer = NodePacer(rate=1.0, window=10.0, quiet=2.0)  # budget 10
    for i in range(4):  # four finished lookups, each queried node X once
        g = Group(float(i))
        pacer.start(g)
        pacer.sent("10.0.0.1", float(i), g)
        pacer.end(g)
    # At t=6 all are quiet: X had 4 queries, so 10 - 4 = 6 may run.
    running = 0
    while pacer.ready(6.0):
        pacer.start(Group(6.0))
        running += 1
    assert running == 6
    assert pacer.busiest(6.0) == 4
    # The first query leaves the count at t=10.5: sent at 0, window 10 s,
    # counted per slot of window/20 = 0.5 s (up to a slot longer: safe side).
    assert pacer.next_change(6.0) == pytest.approx(4.5)
    assert not pacer.ready(10.49)
    assert pacer.ready(10.5)


def test_ended_traversal_counts_until_quiet_and_extra_queries_count_on_top():
    retired = []
    pacer = NodePacer(rate=1.0, window=10.0, quiet=2.0, on_retire=retired.append)
    g = Group(0.0)
    pacer.start(g)
    pacer.sent("10.0.0.1", 0.0, g)
    pacer.end(g)
    assert pacer.running == 1 and not retired
    # The traversal goes on after its lookup ended; a second query to the
    # same address is more than its group was reserved for.
    g.last_activity = 1.0
    pacer.sent("10.0.0.1", 1.0, g)
    assert pacer.ready(2.5)  # still counted (active at 1.0, quiet 2 s)
    assert pacer.running == 1
    assert pacer.ready(3.0)
    assert retired == [g] and pacer.running == 0
    assert pacer.busiest(3.0) == 2
    # X: 2 queries in the window, so 10 - 2 = 8 may start now.
    n = 0
    while pacer.ready(3.0):
        pacer.start(Group(3.0))
        n += 1
    assert n == 8


def test_traversals_of_one_info_hash_share_a_group():
    pacer = NodePacer(rate=1.0, window=10.0, quiet=2.0)
    g = Group(0.0)
    pacer.start(g)
    pacer.start(g)  # the same torrent looked up twice at once
    pacer.sent("10.0.0.1", 0.0, g)
    pacer.sent("10.0.0.1", 0.1, g)  # one query from each traversal
    assert g.assigned == {"10.0.0.1": 2}
    pacer.end(g)
    pacer.end(g)
    assert pacer.running == 2
    # A third lookup of the hash while the group drains keeps all three
    # counted until the group is quiet again.
    g.last_activity = 1.5
    pacer.start(g)
    assert pacer.ready(4.0) and pacer.running == 3
    g.last_activity = 3.5  # its traversal queried
    pacer.end(g)
    assert pacer.ready(5.4) and pacer.running == 3
    assert pacer.ready(5.5) and pacer.running == 0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    pace=st.sampled_from([(1.0, 2.0), (2.0, 2.0), (0.5, 10.0), (4.0, 10.0)]),
    n_ips=st.integers(1, 12),
    n_hashes=st.sampled_from([1, 3, 1000]),
)
def test_simulated_traversals_never_exceed_the_budget_in_any_window(seed, pace, n_ips, n_hashes):
    # Traversals that behave as libtorrent's do in what the pacer relies on:
    # one query per IP per traversal, none once silent for quiet seconds.
    # Otherwise as greedy as possible: start whenever allowed, query fast,
    # keep querying after their lookup ended, often share an info-hash.
    rng = random.Random(seed)
    rate, window = pace
    quiet = 1.0
    groups: dict[int, Group] = {}
    pacer = NodePacer(rate=rate, window=window, quiet=quiet,
                      on_retire=lambda g: groups.pop(next(k for k, v in groups.items() if v is g)))
    ips = [f"10.0.0.{i}" for i in range(n_ips)]
    log: dict[str, list[float]] = defaultdict(list)
    active: list[list] = []  # [group, IPs left, lookup end, ended, own last query]
    now = 0.0
    for _ in range(400):
        now += rng.choice([0.0, 0.01, 0.1, 0.5])
        while rng.random() < 0.7 and pacer.ready(now):
            h = rng.randrange(n_hashes)
            g = groups.get(h)
            if g is None:
                g = groups[h] = Group(now)
            g.last_activity = now
            pacer.start(g)
            active.append([g, set(rng.sample(ips, rng.randint(1, n_ips))), now + rng.uniform(0, 2), False, now])
        for t in list(active):
            g, left, end_at, ended, last = t
            if ended and now - last >= quiet:
                active.remove(t)  # libtorrent sends nothing more
                continue
            if left and rng.random() < 0.5:
                ip = left.pop()
                t[4] = g.last_activity = now
                log[ip].append(now)
                pacer.sent(ip, now, g if any(v is g for v in groups.values()) else None)
            if not ended and now >= end_at:
                t[3] = True
                pacer.end(g)
    for ip, times in log.items():
        assert _max_in_window(times, window) <= pacer.budget, ip


def _max_in_window(times: list[float], window: float) -> int:
    """Most events within any half-open interval (t - window, t]."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_rate_is_a_setting_from_the_environment():
    s = Settings.from_env({"PEERCRAWL_DHT_NODE_RATE": "2.5", "PEERCRAWL_DHT_NODE_WINDOW": "4"})
    assert (s.dht_node_rate, s.dht_node_window) == (2.5, 4.0)
    assert Settings.from_env({}).dht_node_rate == 4.0
    with pytest.raises(SettingsError, match="PEERCRAWL_DHT_NODE_RATE"):
        Settings.from_env({"PEERCRAWL_DHT_NODE_RATE": "0.1"})
    with pytest.raises(SettingsError, match="PEERCRAWL_DHT_NODE_RATE"):
        Settings.from_env({"PEERCRAWL_DHT_NODE_RATE": "fast"})


# --- end to end: a swarm that bans like libtorrent does ---------------------------

LOOKUPS = 80
BAN_WINDOW = 10.0  # libtorrent's dos_blocker counts packets over 10 s
BAN_AT = 50  # ... and bans at 10 x dht_block_ratelimit (5)
_PKT_FROM = re.compile(r"^<== \[([0-9.]+):\d+\]")
_BANNED = re.compile(r"BANNING PEER \[ ip: ([0-9.]+) ")
_GET_PEERS = re.compile(r"'info_hash': '([0-9a-f]{40})' }, 'q': 'get_peers'")


@pytest.fixture(scope="module")
def strict_swarm():
    """12 nodes on 127.0.0.70-81 with libtorrent's own ban limit, logging packets."""
    extra = {
        "dht_block_ratelimit": 5,
        "alert_mask": lt.alert.category_t.dht_log_notification,
        "alert_queue_size": 200_000,
    }
    with announced_swarm(size=12, first_ip=70, node_extra=extra) as swarm:
        yield swarm


def _drain(swarm, lookups: frozenset[str] = frozenset()) -> tuple[list[dict], list[dict], set[str]]:
    """What each swarm node got, by source IP: every packet's time, the times
    of get_peers queries for an info-hash in ``lookups`` (seconds), and the
    IPs some node banned."""
    packets: list[dict] = []
    queries: list[dict] = []
    banned: set[str] = set()
    epoch = datetime.datetime(1970, 1, 1)
    for node in swarm.nodes:
        every, get_peers = defaultdict(list), defaultdict(list)
        for a in node.pop_alerts():
            if type(a) is lt.dht_pkt_alert:
                text = a.message()
                m = _PKT_FROM.match(text)
                if m:
                    t = (a.timestamp() - epoch).total_seconds()
                    every[m.group(1)].append(t)
                    q = _GET_PEERS.search(text)
                    if q and q.group(1) in lookups:
                        get_peers[m.group(1)].append(t)
            elif type(a) is lt.dht_log_alert:
                m = _BANNED.search(a.message())
                if m:
                    banned.add(m.group(1))
        packets.append(every)
        queries.append(get_peers)
    return packets, queries, banned


def _burst(swarm, crawler_ip: str, **changes):
    """LOOKUPS lookups at once (16 in flight): A, B, C, then unannounced hashes."""
    settings = Settings(
        dht_bootstrap=tuple(swarm.endpoints[:3]), dht_listen=((crawler_ip, 0),), allow_private=True,
        dht_timeout=30.0, trackers=(), **changes,
    )
    hashes = [HASH_A, HASH_B, HASH_C] + [hashlib.sha1(f"pacing-{i}".encode()).hexdigest() for i in range(LOOKUPS - 3)]
    _drain(swarm)  # forget what came before
    with DhtSource(settings.replace(dht_settle=0.5)) as source:
        start = time.monotonic()
        jobs = [gevent.spawn(source.lookup, ih) for ih in hashes]
        gevent.joinall(jobs, raise_error=True)
        elapsed = time.monotonic() - start
        paced = source.paced_lookups
    packets, queries, banned = _drain(swarm, frozenset(hashes))
    return Burst(
        results=[j.value for j in jobs],
        worst_packets=max(_max_in_window(sorted(p.get(crawler_ip, [])), BAN_WINDOW) for p in packets),
        worst_queries=max(_max_in_window(sorted(q.get(crawler_ip, [])), BAN_WINDOW) for q in queries),
        banned=crawler_ip in banned,
        elapsed=elapsed,
        paced=paced,
    )


@dataclass
class Burst:
    """What one burst of lookups against the swarm did to its busiest node."""
    results: list
    worst_packets: int  # most packets one node got from the crawler within BAN_WINDOW
    worst_queries: int  # ... of them the lookups' get_peers queries, what the pacer sees
    banned: bool
    elapsed: float
    paced: int


@pytest.mark.slow
def test_paced_burst_never_exceeds_the_node_rate_and_finds_the_peers(strict_swarm):
    burst = _burst(strict_swarm, "127.0.0.11")
    budget = int(Settings().dht_node_rate * Settings().dht_node_window)  # 40 in any 10 s
    assert 0 < burst.worst_queries <= budget
    # Every packet counts for libtorrent's ban, including the bootstrap and
    # the routing-table refreshes (pings, get_peers for random targets) that
    # post no alert, so the pacer cannot see them: the margin under 50 is theirs.
    assert burst.worst_packets < BAN_AT
    assert not burst.banned
    results = burst.results
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert results[0].peers == strict_swarm.expected[HASH_A]
    assert results[1].peers == strict_swarm.expected[HASH_B]
    assert all(r.peers == frozenset() for r in results[2:])
    # The pacer really held lookups back: unpaced, the burst takes ~3 s.
    assert burst.paced > 0
    assert burst.elapsed > BAN_WINDOW * 0.8


@pytest.mark.slow
def test_the_same_burst_unpaced_gets_the_crawler_banned(strict_swarm):
    # What the paced test protects against: 80 lookups at once send the
    # busiest nodes 50 queries and more within 3 s; some lookups then fail.
    burst = _burst(strict_swarm, "127.0.0.12", dht_node_rate=1e6)
    assert burst.paced == 0
    assert burst.banned
    assert burst.worst_packets >= BAN_AT - 1  # the 50th packet is dropped unlogged: the ban
