"""Counters split into shards by IP fingerprint (SPEC §4, §9) on the real Redis and a real cluster.

The same visits recorded into crawls of 1, 3 and 1,024 shards (the most a
namespace may have) give the same ``stats``, the same ``export`` files and the
same StatHat totals; every script call stays in one slot on a cluster; a
rollup that dies mid-batch and a recording killed mid-visit count nothing
twice; and rankings over many names stay exact.
"""

from __future__ import annotations

import calendar
import ipaddress
import random
import uuid
from collections import Counter

import pytest
import redis

import geo
from crawler import store
from crawler.counters import Recorder, top
from crawler.counters.names import FAMILIES
from crawler.counters.rollup import Rollup
from crawler.counters.stats import index_count
from crawler.dashboard.views import Views
from crawler.export import export
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.stathat.flusher import Flusher
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.redis_cluster import redis_cluster  # noqa: F401 (fixture)
from tests.stathat_sink import StatHatSink
from tests.test_counters_concurrency import POOL, expected, record_until_killed

T0 = calendar.timegm((2024, 5, 30, 12, 0, 0))
MONTH2 = T0 + 5 * 86400  # June: a second month's counters
TORRENTS = [f"{n:02x}" * 20 for n in (0xab, 0xcd, 0xef, 0x12)]
IPV6 = [f"2001:db8:1::{n:x}" for n in range(1, 40)]


@pytest.fixture
def locator(tmp_path):
    return geo.open_locator(write_city_db(tmp_path / "city.mmdb"))


def visits(seed: int = 5) -> list[tuple[str, list[str], float]]:
    """Visits of overlapping swarms over two months, with revisits and repeated peers."""
    rng = random.Random(seed)
    out = []
    for i in range(14):
        h = TORRENTS[i % len(TORRENTS)]
        ips = rng.sample(POOL + IPV6, rng.randint(1, 160))
        out.append((h, ips, (T0 if i < 9 else MONTH2) + i))
    return out


def posting(settings: Settings, url: str) -> Settings:
    return settings.replace(stathat_ezkey="k", stathat_url=url,
                            stathat_families=("countries", "torrents", "torrents.processed"))


def every_ranking(client, keys, limit: int) -> dict:
    """Every ``stats`` query the dashboard and the command line make, lifetime and per month."""
    out = {}
    for month in (None, "2024-05", "2024-06"):
        for fam in FAMILIES:
            out[(fam, month)] = top(client, keys, fam, month=month, limit=limit)
            for h in TORRENTS:
                out[(fam, month, h)] = top(client, keys, fam, torrent=h, month=month, limit=limit)
            for c in ("Germany", "United States", "Iceland"):
                out[(fam, month, c)] = top(client, keys, fam, country=c, month=month, limit=limit)
    return out


def crawl(client, namespace, shards, settings, locator, sink_url, tmp_path) -> dict:
    """Record ``visits()`` into a crawl of ``shards`` shards and read back everything."""
    keys = Keys(namespace, shards)
    s = posting(settings, sink_url).replace(namespace=namespace)
    rec = Recorder(client, keys, s, locator, batch_pairs=100)
    news = []
    for h, ips, now in visits():
        news.append(rec.record_visit(h, ips, now))
        rec.visited(h, now)
    rec.sweep()
    fl = Flusher(client, keys, s, chunk=40)
    while True:
        r = fl.flush_once()
        assert r["ok"] and not r["lost"]
        if not any(client.exists(k.outbox, k.outbox_in_flight) for k in keys.all_shards):
            break
    out = tmp_path / f"export-{shards}"
    rows = export(client, keys, out, now=MONTH2 + 86400)
    files = {p.name: p.read_text() for p in sorted(out.iterdir())}
    v = Views(client, keys, s)
    pages = [v.overview(), v.overview(month="2024-06"), v.country("Germany"), v.months_by_country(),
             v.torrent(TORRENTS[1]), v.months(now=MONTH2)]
    return {"news": news, "top3": every_ranking(client, keys, 3), "top": every_ranking(client, keys, 1000),
            "rows": rows, "files": files, "pages": pages}


def test_one_three_and_1024_shards_give_the_same_stats_export_and_stathat(
        client, namespace, settings, locator, tmp_path):
    got, sinks = {}, {}
    for shards in (1, 3, 1024):
        ns = f"{namespace}-{shards}"
        try:
            with StatHatSink() as sink:
                got[shards] = crawl(client, ns, shards, settings, locator, sink.url, tmp_path)
                sinks[shards] = (Counter(sink.counts()), sorted(sink.values("torrents.count")))
        finally:
            delete_namespace(client, ns)
    one = got[1]
    assert sum(one["news"]) > 0 and one["rows"]["torrent_cities"] > 0
    assert len(one["top"][("cities", "2024-06")]) > 0
    for shards in (3, 1024):
        for part in ("news", "top3", "top", "rows", "files", "pages"):
            assert got[shards][part] == one[part], (shards, part)
        assert sinks[shards] == sinks[1], shards
    counts = sinks[1][0]
    processed = len({(h, int(now) // 3600) for h, _, now in visits()})  # once per torrent per hour
    assert counts["torrents.processed"] == processed
    assert counts == Counter({r["metric"]: r["count"] for r in one["top"][("countries", None)]}) + Counter(
        {r["metric"]: r["count"] for fam in ("cities", "postcodes") for r in one["top"][(fam, None)]}) + Counter(
        {r["metric"]: r["count"] for r in one["top"][("torrents", None)]}) + Counter(
        {r["metric"]: r["count"] for h in TORRENTS for fam in ("countries", "cities", "postcodes")
         for r in one["top"][(fam, None, h)]}) + Counter({"torrents.processed": processed})


def test_an_ips_marks_and_counts_stay_in_its_shard(client, namespace, settings, locator):
    keys = Keys(namespace, 3)
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(TORRENTS[0], POOL[:200], T0) == 200
    parts = [int(client.zscore(s.index("all", ("torrents",)), TORRENTS[0]) or 0) for s in keys.all_shards]
    assert sum(parts) == 200 and all(p > 30 for p in parts)  # spread, and each IP counted in one shard
    assert index_count(client, keys, "all", ("torrents",), TORRENTS[0]) == 200
    # the home keeps no counter of its own
    assert not client.exists(keys.index("all", ("torrents",)))
    assert rec.record_visit(TORRENTS[0], POOL[:200], T0 + 60) == 0
    # the probe answers per IP in the visit's order, whatever shard each went to
    located = [(ipaddress.ip_address(ip).packed, locator.locate(ip)) for ip in POOL[190:210]]
    assert rec.probe(TORRENTS[0], located, T0 + 60) == "0" * 10 + "1" * 10
    one = Recorder(client, Keys(namespace + "-one"), settings, locator)
    try:
        one.record_visit(TORRENTS[0], POOL[:200], T0)
        assert one.probe(TORRENTS[0], located, T0 + 60) == rec.probe(TORRENTS[0], located, T0 + 60)
    finally:
        delete_namespace(client, namespace + "-one")


def test_the_sweep_walks_every_shards_buckets(client, namespace, settings, locator):
    keys = Keys(namespace, 3)
    rec = Recorder(client, keys, settings, locator, mark_buckets=48)  # 16 per shard
    rec.record_visit(TORRENTS[0], POOL[:300], T0)
    rec.record_visit(TORRENTS[1], POOL[:300], T0 + 40 * 86400)  # the first visit's marks expire

    def marks():
        return sum(client.strlen(k) // 12 for s in keys.all_shards for k in client.scan_iter(match=s.mark_buckets_match))

    before = marks()
    removed = 0
    for _ in range(4):  # 4 x 12 buckets: each of the 48 once
        removed += rec.sweep(budget=12, now=T0 + 40 * 86400)
    assert removed > 0 and marks() == before - removed
    assert rec.sweep(budget=48, now=T0 + 40 * 86400) == 0
    assert index_count(client, keys, "all", ("torrents",), TORRENTS[1]) == 300


def test_a_rollup_that_dies_mid_batch_adds_each_increment_once(client, namespace, settings, locator):
    keys = Keys(namespace, 4)
    rec = Recorder(client, keys, settings, locator)
    for i, h in enumerate(TORRENTS):
        rec.record_visit(h, POOL[i * 100 : i * 100 + 250], T0 + i)
    dying = Rollup(client, keys)
    taken, _ = dying._take_all(list(range(4)))
    folds, _, _ = dying._fold_calls(taken)
    assert Rollup(client, keys).settle(everything=False) == 0  # the workers leave a young batch to its reader
    assert len(folds) > 4
    for script, k, a in folds[: len(folds) // 2]:  # then it dies: half the chunks added, no batch ended
        script(keys=k, args=a)
    rec.record_visit(TORRENTS[0], POOL[500:520], T0 + 9)  # a fresh outbox meanwhile
    assert Rollup(client, keys).settle() > 0
    for script, k, a in folds:  # the dead reader's calls, replayed late: each refused
        assert script(keys=k, args=a) == 0
    Rollup(client, keys).settle()
    for h in TORRENTS:
        want = index_count(client, keys, "all", ("torrents",), h)
        assert top(client, keys, "torrents", torrent=h)[0]["count"] == want > 0
    want = {c: index_count(client, keys, "all", ("countries",), c) for c in ("Germany", "United States", "Iceland")}
    assert {r["metric"]: r["count"] for r in top(client, keys, "countries")} == {
        f"countries.{c}.users": n for c, n in want.items()}


def test_a_batch_ended_and_replaced_while_read_is_not_added_under_its_old_number(client, namespace, settings, locator):
    keys = Keys(namespace, 2)
    rec = Recorder(client, keys, settings, locator)
    rec.record_visit(TORRENTS[0], POOL[:100], T0)
    r = Rollup(client, keys)
    (first,) = [t for t in r._take_all([0, 1])[0] if t[0] == 0]
    src, batch = first[0], first[1]
    r._fold_all([first])  # another reader adds and ends it...
    rec.record_visit(TORRENTS[1], POOL[:100], T0 + 1)
    (second,) = r._take_all([src])[0]  # ...and the next batch is in flight
    assert second[1] == batch + 1
    assert r._read([(src, batch, False)]) == []  # a slow reader of the first batch reads nothing
    r.settle()
    assert top(client, keys, "torrents", limit=5) == top(client, keys, "torrents", limit=5, settled=True)
    assert sorted(x["count"] for x in top(client, keys, "torrents")) == [
        index_count(client, keys, "all", ("torrents",), h) for h in (TORRENTS[0], TORRENTS[1])] == [100, 100]


@pytest.mark.parametrize("held", [60, 250])
def test_a_recording_killed_mid_visit_then_retried_counts_once_across_shards(
        held, redis_url, namespace, client, settings, tmp_path):
    db = write_city_db(tmp_path / "city.mmdb")
    keys = Keys(namespace, 3)
    h = TORRENTS[0]
    record_until_killed(redis_url, held, namespace, db, h, POOL, shards=3, now=T0)
    before = index_count(client, keys, "all", ("torrents",), h)
    assert 0 < before < len(POOL), "the kill should land mid-visit"
    rec = Recorder(client, keys, settings.replace(stathat_ezkey="k"), geo.open_locator(db), batch_pairs=7)
    assert rec.record_visit(h, POOL, T0 + 5) == len(POOL) - before
    want = expected(geo.open_locator(db), [(h, POOL)])
    got = {}
    for fam in ("countries", "cities", "postcodes"):
        got.update({r["metric"]: r["count"] for r in top(client, keys, fam, limit=1000)})
        got.update({r["metric"]: r["count"] for r in top(client, keys, fam, torrent=h, limit=1000)})
    got.update({r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=1000)})
    assert got == dict(want)
    box = Counter()
    for s in keys.all_shards:
        box.update({k.decode(): int(v) for k, v in client.hgetall(s.outbox).items()})
    assert dict(box) == {m: c for m, c in want.items() if m.startswith("countries.")}


@pytest.mark.parametrize("shards", [16, 1024])
@pytest.mark.parametrize("flat", [False, True], ids=["skewed", "flat"])
def test_rankings_over_many_names_are_exact(client, namespace, flat, shards):
    """Thousands of torrents spread over the shards, counts skewed or all alike: the first N by
    (count, name) are exactly those of the sums over the shards."""
    keys = Keys(namespace, shards)
    rng = random.Random(3)
    names = [f"{rng.getrandbits(160):040x}" for _ in range(3000)]
    want: Counter = Counter()
    pipe = client.pipeline(transaction=False)
    for i, h in enumerate(names):
        for s in rng.sample(range(shards), 1 if flat else rng.randint(1, 4)):
            n = 1 if flat else rng.randint(1, 1 + 3000 // (i + 1))
            want[h] += n
            # the rollup outbox as record.lua writes it beside the shard's index
            shard = keys.shard(s)
            t = shard.index("2024-05", ("torrents",))[shard.index_tail_at:].encode()
            pipe.hincrby(shard.rollup_outbox, len(t).to_bytes(2, "big") + t + h.encode(), n)
            pipe.zincrby(shard.index("all", ("torrents",)), n, h)
    pipe.execute()
    ranked = sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))
    for limit in (1, 20, 137, 5000):
        got = [(r["metric"].split(".")[1], r["count"]) for r in top(client, keys, "torrents", limit=limit)]
        assert got == ranked[:limit]
    assert sum(index_count(client, keys, "all", ("torrents",), h) for h in names[:50]) == sum(
        want[h] for h in names[:50])


@pytest.fixture
def cluster(redis_cluster):  # noqa: F811
    """A client of the cluster through a node, and a namespace on it, removed afterwards."""
    ns = "pccluster-" + uuid.uuid4().hex[:12]
    client = store.connect(Settings(redis_url=redis_cluster.url(redis_cluster.live()[0]),
                                    secret="test-secret-0123456789"))
    yield client, ns
    for k in list(client.scan_iter(match=Keys(ns).match_all, count=1000)):
        client.delete(k)
    client.close()


def test_every_counter_call_keeps_to_one_slot_on_a_cluster(cluster, client, namespace, settings, locator, tmp_path):
    """A crawl of 6 shards on a real cluster (CROSSSLOT would fail a call) equals one shard on one Redis."""
    cclient, cns = cluster
    assert isinstance(cclient, redis.cluster.RedisCluster)
    with StatHatSink() as sink:
        on_cluster = crawl(cclient, cns, 6, settings, locator, sink.url, tmp_path)
        on_cluster["stathat"] = Counter(sink.counts())
    with StatHatSink() as sink:
        single = crawl(client, namespace, 1, settings, locator, sink.url, tmp_path)
        single["stathat"] = Counter(sink.counts())
    for part in ("news", "top3", "top", "rows", "files", "pages", "stathat"):
        assert on_cluster[part] == single[part], part


def test_readers_settling_while_workers_record_keep_the_totals_exact(client, namespace, settings, locator, redis_url):
    """Two writers record and three readers settle at once (each its own connection); then
    every total equals the sum of the shards' parts."""
    import threading

    keys = Keys(namespace, 5)
    stop = threading.Event()
    errors: list = []

    def writer(seed: int) -> None:
        c = redis.Redis.from_url(redis_url)
        rec = Recorder(c, keys, settings, locator, batch_pairs=40)
        rng = random.Random(seed)
        try:
            for i in range(30):
                h = TORRENTS[rng.randrange(len(TORRENTS))]
                rec.record_visit(h, rng.sample(POOL + IPV6, rng.randint(5, 80)), T0 + seed * 1000 + i)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader(everything: bool) -> None:
        c = redis.Redis.from_url(redis_url)
        try:
            while not stop.is_set():
                Rollup(c, keys).settle(everything=everything)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    writers = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
    readers = [threading.Thread(target=reader, args=(e,)) for e in (True, True, False)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in readers:
        t.join(60)
    assert not errors
    got = {r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=100)}
    assert got == {f"torrents.{h}.users": index_count(client, keys, "all", ("torrents",), h) for h in TORRENTS
                   if index_count(client, keys, "all", ("torrents",), h)}
    for c in ("Germany", "United States", "Iceland"):
        want = index_count(client, keys, "all", ("countries",), c)
        assert top(client, keys, "countries", country=c)[0]["count"] == want > 0
        cities = top(client, keys, "cities", country=c, limit=100)
        assert all(r["count"] == index_count(client, keys, "all", ("cities", "c", c), r["metric"].split(".")[3])
                   for r in cities)
