"""Every transition of contract §1 against a real Redis, on one shard and on four (contract §9)."""

import json
import time

import pytest

from crawler.keys import Keys
from crawler.queue.lanes import LANES
from crawler.queue.queue import ADD_STATUS, Queue
from crawler.queue.scoring import Outcome
from crawler.queue.view import QueueView
from crawler.torrents.items import NewItem

H = [f"{i:040x}" for i in range(1, 50)]


@pytest.fixture(params=[1, 4], ids=["1shard", "4shards"])
def keys(request, namespace):
    """The queue on one shard (a single Redis's layout) and on four."""
    return Keys(namespace, request.param)


@pytest.fixture
def q(client, keys, settings):
    return Queue(client, keys, settings)


@pytest.fixture
def view(client, keys):
    return QueueView(client, keys)


def members(client, keys):
    """Every info-hash in each state set (each lane's ready set, cooling, in flight, evicted,
    quarantined) over every shard; they must be disjoint."""
    sets = {}
    names = {"ready" if lane == "normal" else f"ready_{lane}": (lambda k, lane=lane: k.ready_in(lane))
             for lane in LANES}
    names.update({name: (lambda k, name=name: getattr(k, name))
                  for name in ("cooling", "leases", "evicted", "quarantined")})
    for name, key in names.items():
        sets[name] = {m.decode() for k in keys.all_shards for m in client.zrange(key(k), 0, -1)}
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not sets[a] & sets[b], (a, b)
    return sets


def test_new_torrents_enter_ready_with_score_one(q, view, client, keys):
    assert q.add([NewItem(H[0]), NewItem(H[1])], now=100) == ["added", "added"]
    assert view.state(H[0], 100) == ("ready", 1.0)
    # admitted due at once; the first claim ranks them in the ready set
    assert members(client, keys)["cooling"] == {H[0], H[1]}
    assert view.counts(100)["ready"] == 2 and view.counts(100)["cooling"] == 0
    q.housekeep(now=100)
    assert members(client, keys)["ready"] == {H[0], H[1]}
    assert [l.score for l in q.claim(5, now=101)] == [1.0, 1.0]


def test_adding_a_tracked_torrent_keeps_score_and_state_and_merges_trackers(q, view, client, keys):
    q.add([NewItem(H[0], ("udp://a:1/announce",))], now=100)
    (lease,) = q.claim(1, now=101)
    q.complete(lease, Outcome.SOME, now=102)
    assert q.add([NewItem(H[0], ("http://b:2/announce",))], now=103) == ["already_tracked"]
    state, score = view.state(H[0], 103)
    assert state == "cooling" and score == pytest.approx(0.8)
    assert view.torrent(H[0], 103)["trackers"] == ["http://b:2/announce", "udp://a:1/announce"]
    # in flight too
    q.add([NewItem(H[1])], now=100)
    (lease,) = q.claim(1, now=104)
    assert q.add([NewItem(H[1])], now=105) == ["already_tracked"]
    assert view.state(H[1], 105)[0] == "in_flight"


def test_claim_takes_highest_score_first(q, client, keys):
    q.add([NewItem(h) for h in H[:3]], now=100)
    # give them different scores: visit H0 (x0.5), H1 (x1.2), H2 untouched
    leases = {l.info_hash: l for l in q.claim(3, now=101)}
    q.complete(leases[H[0]], Outcome.NONE, now=101, due=150)
    q.complete(leases[H[1]], Outcome.FULL, now=101, due=150)
    q.release(leases[H[2]], now=101)
    got = [l.info_hash for l in q.claim(3, now=200)]
    assert got == [H[1], H[2], H[0]]


def test_lease_expiry_returns_torrent_with_score_kept_and_claims_raised(q, view, settings):
    q.add([NewItem(H[0])], now=100)
    (l1,) = q.claim(1, now=100)
    assert l1.token == 1
    assert q.claim(1, now=100 + settings.lease_seconds - 1) == []
    (l2,) = q.claim(1, now=100 + settings.lease_seconds + 1)
    assert (l2.info_hash, l2.score, l2.token) == (H[0], 1.0, 2)
    # the first holder's late completion changes nothing
    assert q.complete(l1, Outcome.NONE, now=300) == ("stale", None)
    assert q.extend(l1, now=300) is False
    assert q.fail(l1, now=300) is False
    assert q.release(l1, now=300) is False
    assert view.state(H[0], 300)[0] == "in_flight"
    assert view.torrent(H[0], 300)["claims"] == 2


def test_extend_keeps_the_lease(q, settings):
    q.add([NewItem(H[0])], now=100)
    (lease,) = q.claim(1, now=100)
    t = 100
    for _ in range(5):
        t += settings.lease_seconds - 1
        assert q.extend(lease, now=t)
        assert q.claim(1, now=t + settings.lease_seconds - 1) == []
    assert q.complete(lease, Outcome.SOME, now=t)[0] == "cooling"


def test_complete_cools_for_the_revisit_interval(q, view, settings):
    q.add([NewItem(H[0])], now=100)
    (lease,) = q.claim(1, now=100)
    q.complete(lease, Outcome.SOME, now=110, peers=7, seeders=3, leechers=4)
    assert q.claim(1, now=110 + settings.revisit_seconds - 1) == []
    assert view.state(H[0], 111)[0] == "cooling"
    info = view.torrent(H[0], 111)
    assert (info["visits"], info["seeders"], info["leechers"], info["peers_last_visit"]) == (1, 3, 4, 7)
    assert info["last_visit"] == 110 and info["due"] == 110 + settings.revisit_seconds
    (again,) = q.claim(1, now=110 + settings.revisit_seconds + 1)
    assert again.score == pytest.approx(0.8)


def test_failed_visit_keeps_score_and_retries_sooner(q, view, settings):
    q.add([NewItem(H[0])], now=100)
    (lease,) = q.claim(1, now=100)
    q.complete(lease, Outcome.NONE, now=100, due=100)
    (lease,) = q.claim(1, now=101)
    assert lease.score == 0.5
    for i in range(20):  # a long outage: nothing decays, nothing is evicted
        assert q.fail(lease, "all sources failed", now=101 + i * 1000)
        assert q.claim(1, now=101 + i * 1000 + settings.retry_seconds - 1) == []
        (lease,) = q.claim(1, now=101 + i * 1000 + settings.retry_seconds + 1)
        assert lease.score == 0.5
    info = view.torrent(H[0], 200000)
    assert info["failed_visits"] == 20 and info["visits"] == 1 and info["last_error"] == "all sources failed"


def test_eviction_leaves_a_tombstone_that_expires(q, view, client, keys, settings):
    q.add([NewItem(H[0], ("udp://a:1/announce",))], now=100)
    t = 100
    for _ in range(8):
        (lease,) = q.claim(1, now=t)
        state, score = q.complete(lease, Outcome.NONE, now=t, due=t)
        t += 1
    assert state == "evicted" and score == pytest.approx(0.5**8)
    tomb = json.loads(client.hget(keys.for_torrent(H[0]).tombstones, H[0]))
    # eight visits without a peer (staged eviction's grace off in tests): it never had one
    assert tomb["reason"] == "never had peers" and float(tomb["score"]) == pytest.approx(0.5**8)
    assert view.torrent(H[0], t)["state"] == "evicted"
    assert 0 < client.ttl(keys.for_torrent(H[0]).torrent(H[0])) <= settings.tombstone_seconds
    assert view.counts(t)["evicted"] == 1 and view.counts(t)["tracked"] == 0
    # before the tombstone period: add refuses; after it, housekeeping forgets it
    assert q.add([NewItem(H[0])], now=t) == ["skipped_evicted"]
    q.housekeep(now=t + settings.tombstone_seconds + 10)
    assert view.state(H[0], t)[0] is None
    assert q.add([NewItem(H[0])], now=t) == ["added"]


def test_readmit_brings_an_evicted_torrent_back(q, view, client, keys):
    q.add([NewItem(H[0])], now=100)
    t = 100
    for _ in range(8):
        (lease,) = q.claim(1, now=t)
        q.complete(lease, Outcome.NONE, now=t, due=t)
        t += 1
    assert q.add([NewItem(H[0])], readmit=True, now=t) == ["added"]
    assert view.state(H[0], t) == ("ready", 1.0)
    assert client.ttl(keys.for_torrent(H[0]).torrent(H[0])) == -1
    assert client.hget(keys.for_torrent(H[0]).tombstones, H[0]) is None


def test_release_hands_back_unvisited(q, view):
    q.add([NewItem(H[0])], now=100)
    (lease,) = q.claim(1, now=100)
    assert q.release(lease, now=101)
    assert view.state(H[0], 101) == ("ready", 1.0)
    assert view.torrent(H[0], 101)["visits"] == 0


def test_counts_and_latency(q, view):
    q.add([NewItem(h) for h in H[:4]], now=100)
    leases = q.claim(3, now=250)
    q.complete(leases[0], Outcome.SOME, now=250, due=260)
    q.complete(leases[1], Outcome.SOME, now=250, due=5000)
    c = view.counts(now=300)
    # the one due at 260 counts as ready; the fourth has been ready since 100
    assert c == {"tracked": 4, "ready": 2, "cooling": 1, "in_flight": 1, "evicted": 0, "quarantined": 0,
                 "queue_latency_s": 200.0}


def test_no_sequence_loses_or_duplicates(view, client, keys, settings):
    """A random walk over every operation keeps each torrent in exactly one state."""
    import random

    # a visit without peers evicts, two expired leases in a row quarantine: the walk meets every state
    settings = settings.replace(evict_below=0.6, quarantine_after=2)
    q = Queue(client, keys, settings)
    rnd = random.Random(7)
    hashes = H[:20]
    t = 1000.0
    held = []
    added: set[str] = set()  # every info-hash an add admitted; each of them is tracked from then on
    seen_in = set()
    for _step in range(600):
        t += rnd.choice([0.5, 5, 50, 400])
        op = rnd.random()
        if op < 0.15:
            h = rnd.choice(hashes)
            (status,) = q.add([NewItem(h)], readmit=rnd.random() < 0.3, now=t)
            assert status in ADD_STATUS.values()
            added.add(h)
        elif op < 0.45:
            held += q.claim(rnd.randint(1, 3), now=t)
        elif held:
            lease = held.pop(rnd.randrange(len(held)))
            action = rnd.choice(["complete", "fail", "release", "extend", "drop"])
            if action == "complete":
                q.complete(lease, rnd.choice(list(Outcome)), now=t, due=t + rnd.choice([1, 100]))
            elif action == "fail":
                q.fail(lease, now=t, due=t + 10)
            elif action == "release":
                q.release(lease, now=t)
            elif action == "extend":
                q.extend(lease, now=t)
                held.append(lease)
        sets = members(client, keys)  # disjoint
        seen_in.update(name for name, hs in sets.items() if hs)
        # everything ever added is in exactly one state set, and nothing else is (no tombstone
        # expires in this walk's time), and its state reads back
        assert set().union(*sets.values()) == added, _step
        for h in added:
            assert view.state(h, t)[0] is not None
    assert t - 1000.0 < settings.tombstone_seconds
    assert {"ready", "cooling", "leases", "evicted", "quarantined"} <= seen_in  # the walk met them


def test_add_any_number_of_items(q, view):
    many = ["%040x" % (7 * 10**9 + i) for i in range(5000)]
    assert q.add([NewItem(h) for h in many], now=100) == ["added"] * 5000
    assert view.counts(100)["ready"] == 5000


def test_old_minute_counts_are_trimmed_without_status(q, view, settings):
    # A visit and a failure three days ago, another visit now: trimming drops
    # the old minute of each hash and keeps what status reads.
    day = 86400
    t0 = 1_000_000
    q.add([NewItem(H[0]), NewItem(H[1])], now=t0)
    a, b = q.claim(2, now=t0)
    q.complete(a, Outcome.SOME, now=t0, due=t0 + 10)
    assert q.fail(b, "no answer", now=t0)
    (a,) = q.claim(1, now=t0 + 3 * day)
    q.complete(a, Outcome.SOME, now=t0 + 3 * day)
    def minutes(name):
        return sum(len(q.client.hkeys(getattr(k, name))) for k in q.keys.all_shards)

    assert minutes("visits") == 2 and minutes("failed_visits") == 1
    assert q.trim_visit_buckets(now=t0 + 3 * day) == 2
    assert minutes("failed_visits") == 0
    assert view.visits_since(3600, now=t0 + 3 * day) == 1
    assert q.trim_visit_buckets(now=t0 + 3 * day) == 0


def test_held_trackers_come_back_in_the_plan_until_the_hold_expires(q, view, client, keys):
    a, b = "udp://a:1/announce", "http://b:2/announce"
    q.add([NewItem(H[0], (a, b))], now=100)
    assert sorted(q.plan(H[0])[0]) == [b, a] and q.plan(H[0])[1].not_before == {}
    q.hold_trackers(H[0], {a: 1234.5}, ttl=60)
    q.hold_trackers(H[0], {b: 99.0}, ttl=60)
    own, noted, _, raw, until = q.plan(H[0])
    not_before = noted.not_before
    assert sorted(own) == [b, a] and not_before == {a: 1234.5, b: 99.0}
    # the notes as stored, and when they expire (what a visit needs to leave unchanged ones alone)
    assert raw == {a: "1234.5", b: "99.0"} and time.time() < until <= time.time() + 60
    assert view.torrent(H[0], 100)["tracker_not_before"] == not_before
    notes = keys.for_torrent(H[0]).tracker_min_interval(H[0])
    assert 0 < client.ttl(notes) <= 60
    q.plans.note(H[0], {a: "1300.0"}, (b,), 3600)  # a write renews the notes' life
    assert 60 < client.ttl(notes) <= 3600 and q.plan(H[0])[1].not_before == {a: 1300.0}
    q.plans.note(H[0], {}, (a,), 60)  # the last field dropped: no notes left to keep
    assert not client.exists(notes) and q.plan(H[0])[1].not_before == {}


def test_a_torrent_keeps_its_last_visits_oldest_first(client, keys, settings, view):
    q = Queue(client, keys, settings.replace(torrent_history=3))
    q.add([NewItem(H[0])], now=100)
    outcomes = [(Outcome.FULL, 50, 7, None), (Outcome.SOME, 40, None, 3), (Outcome.NONE, 0, 0, 0),
                (Outcome.FULL, 60, 9, 12)]
    for i, (o, peers, seeders, leechers) in enumerate(outcomes):
        (lease,) = q.claim(1, now=1000 * (i + 1))
        q.complete(lease, o, peers=peers, seeders=seeders, leechers=leechers, due=0, now=1000 * (i + 1) + 5)
    hist = view.torrent(H[0])["history"]
    # three kept: the first visit (score 1.2) dropped; scores 1.2*0.8, *0.5, *1.2
    assert hist == [
        {"at": 2005.0, "score": pytest.approx(0.96), "peers": 40, "seeders": None, "leechers": 3},
        {"at": 3005.0, "score": pytest.approx(0.48), "peers": 0, "seeders": 0, "leechers": 0},
        {"at": 4005.0, "score": pytest.approx(0.576), "peers": 60, "seeders": 9, "leechers": 12},
    ]
    assert view.torrent(H[0])["visits"] == 4  # the count is every visit, the history the last ones


def test_the_history_is_a_ring_read_oldest_first_whatever_its_size_was(client, keys, settings, view):
    """Each visit overwrites the oldest entry: after any number of visits the last ``kept`` are read,
    oldest first; fewer kept than when written cuts the ring, more pads it, and a key of another type
    is replaced with the completion whole (its score, visit count and due time all applied)."""
    hkey = keys.for_torrent(H[2]).history(H[2])

    def visit(kept: int, at: int, peers: int) -> None:
        q = Queue(client, keys, settings.replace(torrent_history=kept))
        (lease,) = q.claim(1, now=at)
        assert q.complete(lease, Outcome.FULL, peers=peers, due=0, now=at)[0] == "cooling"

    Queue(client, keys, settings).add([NewItem(H[2])], now=100)
    for i in range(1, 8):  # past two turns of a ring of three
        visit(3, 1000 * i, i)
        assert [v["peers"] for v in view.torrent(H[2])["history"]] == list(range(max(1, i - 2), i + 1))
    assert client.strlen(hkey) == 3 * 20
    for i in range(8, 12):  # more kept than written: the ring grows to five, its first turn a mix
        visit(5, 1000 * i, i)
    hist = [v["peers"] for v in view.torrent(H[2])["history"]]
    assert len(hist) == 5 and hist[1:] == [8, 9, 10, 11]
    visit(5, 11_500, 115)  # one turn at the new size: the last five
    assert [v["peers"] for v in view.torrent(H[2])["history"]] == [8, 9, 10, 11, 115]
    visit(2, 12_000, 12)  # fewer kept: cut to two at once, this visit one of them
    hist = [v["peers"] for v in view.torrent(H[2])["history"]]
    assert len(hist) == 2 and hist[-1] == 12 and client.strlen(hkey) == 2 * 20
    visit(2, 13_000, 13)
    assert [v["peers"] for v in view.torrent(H[2])["history"]] == [12, 13]
    visits = view.torrent(H[2])["visits"]
    client.delete(hkey)
    client.hset(hkey, "not", "a history")  # another type: the completion is not cut short by it
    visit(2, 14_000, 14)
    t = view.torrent(H[2])
    assert [v["peers"] for v in t["history"]] == [14] and t["visits"] == visits + 1 and t["state"] == "ready"


def test_the_history_at_its_largest_drops_one_per_visit_and_off_forgets_it(client, keys, settings, view):
    from crawler.queue.torrent_record import HISTORY_ENTRY

    most = 10_000
    q = Queue(client, keys, settings.replace(torrent_history=most))
    q.add([NewItem(H[1])], now=100)
    client.set(keys.for_torrent(H[1]).history(H[1]),
               b"".join(HISTORY_ENTRY.pack(t, 1.0, t, t, t) for t in range(most)))
    (lease,) = q.claim(1, now=200_000)
    q.complete(lease, Outcome.SOME, peers=5, due=0, now=200_001)
    hist = view.torrent(H[1])["history"]
    assert len(hist) == most and hist[0]["at"] == 1.0 and hist[-1]["at"] == 200_001.0 and hist[-1]["peers"] == 5
    # bytes this script did not write (a length not a whole number of entries): started again
    client.set(keys.for_torrent(H[1]).history(H[1]), b"\x00" * 21)
    (lease,) = q.claim(1, now=300_000)
    q.complete(lease, Outcome.SOME, peers=6, due=0, now=300_001)
    assert [v["peers"] for v in view.torrent(H[1])["history"]] == [6]
    off = Queue(client, keys, settings.replace(torrent_history=0))
    (lease,) = off.claim(1, now=400_000)
    off.complete(lease, Outcome.SOME, peers=7, due=0, now=400_001)
    assert view.torrent(H[1])["history"] == [] and not client.exists(keys.for_torrent(H[1]).history(H[1]))


def test_an_evicted_torrents_history_expires_with_its_tombstone_unless_readmitted(client, keys, settings, view):
    q = Queue(client, keys, settings.replace(evict_below=0.9))
    q.add([NewItem(H[2])], now=100)
    (lease,) = q.claim(1, now=200)
    assert q.complete(lease, Outcome.NONE, peers=0, now=201)[0] == "evicted"
    assert 0 < client.ttl(keys.for_torrent(H[2]).history(H[2])) <= settings.tombstone_seconds
    assert [v["score"] for v in view.torrent(H[2])["history"]] == [0.5]
    assert q.add([NewItem(H[2])], readmit=True, now=300) == ["added"]
    assert client.ttl(keys.for_torrent(H[2]).history(H[2])) == -1 and len(view.torrent(H[2])["history"]) == 1


def test_a_visit_notes_every_tracker_of_a_torrent_with_the_most_trackers_allowed(client, keys, settings):
    n = 10_000  # PEERCRAWL_MAX_TRACKERS_PER_TORRENT's largest value
    q = Queue(client, keys, settings.replace(max_trackers_per_torrent=n))
    urls = [f"udp://t{i}.example:1/announce" for i in range(n)]
    q.add([NewItem(H[0], tuple(urls))], now=100)
    q.plans.note(H[0], {u: repr(5000.0 + i) for i, u in enumerate(urls)} | {"dht:empty": "3", "dht": "7000.5"},
                 ("last",), 60)
    own, noted, *_ = q.plan(H[0])
    assert len(own) == n and noted.not_before == {u: 5000.0 + i for i, u in enumerate(urls)}
    assert (noted.dht_empty, noted.dht_not_before, noted.last) == (3, 7000.5, None)
    q.plans.note(H[0], {}, ("dht", "dht:empty"), 60)
    assert q.plan(H[0])[1].dht_empty == 0 and q.plan(H[0])[1].dht_not_before == 0.0


def test_a_completion_writes_its_visits_notes_first_even_when_its_lease_is_stale(q, client, keys):
    url = "udp://a:1/announce"
    q.add([NewItem(H[3], (url,))], now=100)
    (lease,) = q.claim(1, now=200)
    notes = q.plans.note_args({url: "5000.5", "dht": "900.5"}, (), 60)
    assert q.complete(lease, Outcome.SOME, now=201, notes=notes)[0] == "cooling"
    noted = q.plan(H[3])[1]
    assert noted.not_before == {url: 5000.5} and noted.dht_not_before == 900.5
    assert 0 < client.ttl(keys.for_torrent(H[3]).tracker_min_interval(H[3])) <= 60
    # the lease completed again: stale, yet its notes are written (its sources were asked)
    again = q.plans.note_args({url: "6000.5"}, ("dht",), 120)
    assert q.complete(lease, Outcome.SOME, now=202, notes=again)[0] == "stale"
    noted = q.plan(H[3])[1]
    assert noted.not_before == {url: 6000.5} and noted.dht_not_before == 0.0
    assert 60 < client.ttl(keys.for_torrent(H[3]).tracker_min_interval(H[3])) <= 120


def test_every_transition_of_the_table_is_a_script_beside_the_queue_and_a_method_of_it():
    import pathlib

    from crawler.queue.queue import TRANSITIONS, Queue

    room = pathlib.Path(__file__).resolve().parent.parent / "crawler" / "queue"
    assert {n for n in TRANSITIONS if not (room / f"{n}.lua").is_file()} == set()
    assert {n for n in TRANSITIONS if not callable(getattr(Queue, n, None))} == set()
