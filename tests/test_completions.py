"""Completions made together (``Queue.complete_many``, ``workers.completions``): a batch leaves the
queue exactly as the same visits completed one by one, answers each visit on its own, and a worker's
runners share calls."""

from __future__ import annotations

import random
import re
import uuid

import gevent
import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue import script_calls
from crawler.queue.pins import Pins
from crawler.queue.queue import MAX_COMPLETIONS, Completion, Queue
from crawler.queue.scoring import Outcome
from crawler.settings import Settings
from crawler.store.connect import connect
from crawler.torrents.items import NewItem
from tests.namespaces import delete_namespace
from tests.redis_cluster import redis_cluster  # noqa: F401 (fixture)
from tests.test_queue_shards import hashes
from workers.completions import Completions

T0 = 1_900_000_000.0


def contents(client: redis.Redis, namespace: str) -> dict:
    """Every key of ``namespace`` (its name without the namespace and its shards' slot spreaders)
    and its value, by type."""
    out = {}
    for key in client.scan_iter(match=Keys(namespace).match_all, count=1000):
        kind = client.type(key).decode()
        name = re.sub(r"/(\d+)\.\d+}", r"/\1}", key.decode().replace(namespace, "NS"))
        if kind == "hash":
            # a claim's count of torrents asked for (``a:<minute>``) is in the shard the claim chose
            value = {f.decode(): v for f, v in client.hgetall(key).items() if not f.startswith(b"a:")}
        elif kind == "zset":
            value = dict(client.zrange(key, 0, -1, withscores=True))
        elif kind == "set":
            value = client.smembers(key)
        elif kind == "string":
            value = client.get(key)
        else:
            value = kind
        ttl = client.ttl(key)
        out[name] = (kind, value, ttl > 0)
    return out


def visits_of(rng: random.Random, leases: list, now: float, duplicates: bool) -> list[Completion]:
    """A completion of each lease with varied outcomes, sizes, notes and due times; with
    ``duplicates``, some leases completed twice and some with a token that is not theirs."""
    out = []
    for lease in leases:
        result = rng.choice([Outcome.NONE, Outcome.SOME, Outcome.FULL])
        peers = 0 if result is Outcome.NONE else rng.randint(1, 200)
        notes = rng.choice([None, [60, "1", "udp://t.example:1", str(now + 30)], [60, "0", "gone"]])
        reported = rng.choice([None, 0, peers + rng.randint(0, 50)])
        out.append(Completion(lease, result, now + rng.random(), peers, rng.choice([None, 3]),
                              rng.choice([None, 7]), rng.choice([None, now + 900]), reported, rng.randint(0, peers),
                              rng.random() < 0.2, notes, now + rng.random()))
        if duplicates and rng.random() < 0.1:
            out.append(out[-1])
        if duplicates and rng.random() < 0.1:
            wrong = type(lease)(lease.info_hash, lease.score, lease.token + 1, lease.claimed, lease.lane)
            out.append(out[-1]._replace(lease=wrong))
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("shards", [1, 3])
def test_a_batch_leaves_the_queue_as_its_visits_one_by_one(client, namespace, other_namespace, settings, shards):
    # Two queues alike: one completes each visit alone, the other in random batches (past the
    # largest a call takes), over rounds of claims, with evictions, pins, lanes, notes, coverage,
    # visits completed twice in a batch and stale tokens. Every key ends equal.
    s = settings.replace(evict_never_seen_seconds=0.0, evict_lost_seconds=0.0, torrent_history=3, evict_below=0.3)
    alone, batched = (Queue(client, Keys(ns, shards), s) for ns in (namespace, other_namespace))
    hs = hashes(300, "complete-many")
    for q in (alone, batched):
        for lane, part in (("normal", hs[:150]), ("high", hs[150:200]), ("low", hs[200:250]),
                           ("discovered", hs[250:])):
            q.add([NewItem(h) for h in part], now=T0, lane=lane)
        pins = Pins(q.client, q.keys)
        for h in hs[:5]:
            pins.pin(h)  # forever: never evicted
    rng = random.Random(7)
    answers_alone, answers_batched = [], []
    for r in range(4):
        now = T0 + 1 + r * 2000
        la, lb = alone.claim(400, now=now), batched.claim(400, now=now)
        assert [x.info_hash for x in la] == [x.info_hash for x in lb] and la
        seed = rng.random()
        va = visits_of(random.Random(seed), la, now, duplicates=True)
        vb = visits_of(random.Random(seed), lb, now, duplicates=True)
        for c in va:
            try:
                answers_alone.append(alone.complete(c.lease, c.result, peers=c.peers, seeders=c.seeders,
                                                    leechers=c.leechers, due=c.due, now=c.now, reported=c.reported,
                                                    new=c.new, estimated=c.estimated, notes=c.notes, sent=c.sent))
            except StoreError as e:  # pragma: no cover - nothing here is damaged
                answers_alone.append(str(e))
        at = 0
        while at < len(vb):
            n = rng.choice([1, 2, 17, MAX_COMPLETIONS + 40])
            answers_batched += batched.complete_many(vb[at : at + n])
            at += n
    assert answers_batched == answers_alone
    states = [a[0] for a in answers_alone]
    assert {"cooling", "evicted", "stale"} <= set(states)
    assert contents(client, namespace) == contents(client, other_namespace)


def test_a_damaged_torrent_fails_its_own_visit_only(client, keys, settings):
    q = Queue(client, keys, settings)
    a, b, c = hashes(3, "damaged")
    q.add([NewItem(h) for h in (a, b, c)], now=T0)
    leases = {x.info_hash: x for x in q.claim(3, now=T0 + 1)}
    client.hset(keys.torrent(b), "visits", "garbage")
    client.delete(keys.for_torrent(c).tracker_min_interval(c))
    client.set(keys.for_torrent(c).tracker_min_interval(c), "not a hash")
    notes = [60, "1", "udp://t.example:1", str(T0 + 30)]
    visits = [Completion(leases[h], Outcome.SOME, T0 + 2, 5, notes=notes) for h in (a, b, c)]
    out = q.complete_many(visits)
    assert out[0][0] == "cooling"
    assert isinstance(out[1], StoreError) and "stored score or count" in str(out[1])
    assert isinstance(out[2], StoreError) and "not a hash" in str(out[2])
    # the damaged ones are still in flight, their torrents unchanged but for the notes (written first)
    assert client.zscore(keys.leases, b) is not None and client.zscore(keys.leases, c) is not None
    assert client.zscore(keys.leases, a) is None and client.zscore(keys.cooling, a) is not None
    assert client.hget(keys.torrent(b), "visits") == b"garbage" and client.hget(keys.torrent(c), "visits") is None
    assert client.hexists(keys.for_torrent(b).tracker_min_interval(b), "udp://t.example:1")
    assert client.hget(keys.visits, str(int((T0 + 2) // 60) * 60)) == b"1"
    with pytest.raises(StoreError, match="stored score or count"):
        q.complete(leases[b], Outcome.SOME, now=T0 + 3)


def test_a_call_refused_fails_its_own_shards_visits_only(client, namespace, settings):
    keys = Keys(namespace, 2)
    q = Queue(client, keys, settings)
    hs = hashes(40, "refused")
    q.add([NewItem(h) for h in hs], now=T0)
    leases = []
    while len(leases) < 40 and (more := q.claim(40, now=T0 + 1)):
        leases += more
    shard0 = keys.shard(0)
    # a due time complete.lua refuses (NaN) in one visit of shard 0: its call is refused whole, before any write
    bad = next(x.info_hash for x in leases if keys.for_torrent(x.info_hash) == shard0)
    visits = [Completion(x, Outcome.SOME, T0 + 2, 3, due=float("nan") if x.info_hash == bad else None) for x in leases]
    out = q.complete_many(visits)
    for x, answer in zip(leases, out):
        if keys.for_torrent(x.info_hash) == shard0:
            assert isinstance(answer, StoreError) and "bad arguments" in str(answer)
        else:
            assert answer[0] == "cooling"
    assert client.zcard(keys.shard(0).leases) == sum(keys.for_torrent(h) == shard0 for h in hs) > 0
    assert client.zcard(keys.shard(1).leases) == 0


def test_runners_completing_together_share_calls(client, keys, settings):
    q = Queue(client, keys, settings)
    hs = hashes(200, "together")
    q.add([NewItem(h) for h in hs], now=T0)
    leases = q.claim(200, now=T0 + 1)
    completions = Completions(q)
    answers = {}

    def runner(lease) -> None:
        gevent.sleep(0)
        answers[lease.info_hash] = completions.complete(Completion(lease, Outcome.SOME, T0 + 2, 3))

    gevent.joinall([gevent.spawn(runner, x) for x in leases], raise_error=True)
    assert {a[0] for a in answers.values()} == {"cooling"} and len(answers) == 200
    assert completions.units == 200 and completions.batches < 50
    assert client.zcard(keys.cooling) == 200 and client.zcard(keys.leases) == 0
    assert client.hget(keys.visits, str(int((T0 + 2) // 60) * 60)) == b"200"


def test_a_batch_across_shards_on_a_redis_cluster_is_a_call_a_shard(redis_cluster):  # noqa: F811
    # Each shard's call holds only keys of its slot (its shard's, its torrents', its lanes' member sets):
    # a batch of a queue of 5 shards over the cluster's masters completes whole, cooling or evicted.
    ns = "pccluster-" + uuid.uuid4().hex[:12]
    client = connect(Settings(redis_url=redis_cluster.url(redis_cluster.live()[0]), secret="x" * 16))
    keys = Keys(ns, 5)
    try:
        s = Settings(evict_never_seen_seconds=0.0, evict_lost_seconds=0.0, evict_below=0.6)
        q = Queue(client, keys, s)
        hs = hashes(60, "cluster")
        q.add([NewItem(h) for h in hs[:30]], now=T0)
        q.add([NewItem(h) for h in hs[30:]], now=T0, lane="low")
        leases: list = []
        while len(leases) < 60 and (more := q.claim(60 - len(leases), now=T0 + 1)):
            leases += more  # a sharded claim stops where its lane runs out
        assert len(leases) == 60
        visits = [Completion(x, Outcome.NONE if i % 3 == 0 else Outcome.SOME, T0 + 2, 0 if i % 3 == 0 else 4,
                             notes=[60, "1", "udp://t.example:1", str(T0 + 30)]) for i, x in enumerate(leases)]
        answers = q.complete_many(visits)
        assert sorted(a[0] for a in answers) == ["cooling"] * 40 + ["evicted"] * 20
        assert sum(client.zcard(k.leases) for k in q.keys.all_shards) == 0
        assert sum(client.zcard(k.cooling) for k in q.keys.all_shards) == 40
        # the low lane's torrents back to cooling have their due time in its member set (claim.lua's index)
        cooled = {x.lease.info_hash for x, a in zip(visits, answers) if a[0] == "cooling" and x.lease.lane == "low"}
        due = {m.decode() for k in q.keys.all_shards
               for m in client.zrangebyscore(k.lane_members("low"), "(0", "+inf")}
        assert due == cooled and len(cooled) > 5
        assert all(client.exists(q.keys.for_torrent(h).tracker_min_interval(h)) for h in hs)
    finally:
        for k in keys.all_shards + (keys,):
            for key in client.scan_iter(match=k.prefix + "*", count=1000):
                client.delete(key)
        client.close()


def dumps(client: redis.Redis, namespace: str) -> dict:
    """Every key of ``namespace`` as Redis would restore it."""
    return {k: client.dump(k) for k in client.scan_iter(match=Keys(namespace).match_all, count=1000)}


ARG = st.one_of(st.text(max_size=6), st.binary(max_size=6), st.sampled_from(["", "0", "1", "-1", "nan", "inf", "17",
                                                                            "1e400", "123", "rt:1:2", "none",
                                                                            " 5", "5 ", "0x10", "1.5", "6e1"]))


@settings_h(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 4), edits=st.lists(st.tuples(st.integers(0, 200), ARG), max_size=4),
       cut=st.integers(-3, 3), keys_cut=st.integers(-5, 5))
def test_any_batch_arguments_are_refused_in_one_line_or_taken_whole(client, namespace, settings, n, edits, cut,
                                                                    keys_cut):
    """complete.lua's batch of visits with any arguments changed, cut or added (visit counts, notes
    lengths, lanes, numbers) and any KEYS short or long: a one-line refusal naming complete.lua with
    nothing changed, or one answer a visit."""
    ns = f"{namespace}-{uuid.uuid4().hex[:6]}"
    keys = Keys(ns)
    q = Queue(client, keys, settings)
    try:
        hs = hashes(n, ns)
        q.add([NewItem(h) for h in hs], now=T0)
        leases = q.claim(n, now=T0 + 1)
        visits = [Completion(x, Outcome.SOME, T0 + 2, 3, notes=[60, "1", "udp://t.example:1", str(T0 + 30), "gone"])
                  for x in leases]
        call = script_calls.complete_args(keys, q.settings, visits)
        args, ks = list(call["args"]), list(call["keys"])
        for at, value in edits:
            args[at % len(args)] = value
        args = args[: len(args) + cut] if cut < 0 else args + ["1"] * cut
        ks = ks[: len(ks) + keys_cut] if keys_cut < 0 else ks + [keys.torrent("0" * 40)] * keys_cut
        before = dumps(client, ns)
        try:
            got = q._complete(keys=ks, args=args)
        except redis.ResponseError as e:
            assert str(e).startswith("complete.lua: ") and "\n" not in str(e), str(e)
            assert dumps(client, ns) == before
        else:
            assert isinstance(got, list) and 1 <= len(got) <= n + 3
            assert all(a[0] in (b"cooling", b"evicted", b"stale", b"error") for a in got)
    finally:
        delete_namespace(client, ns)
