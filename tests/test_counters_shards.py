"""Counters split into shards by IP fingerprint (contract §4, §9) on the real Redis and a real cluster.

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
from crawler.counters import Recorder, month_of, top
from crawler.counters.csv_export import export
from crawler.counters.names import FAMILIES
from crawler.counters.rankings import index_count
from crawler.counters.rollup import Rollup, outbox_field
from crawler.dashboard.views import Views
from crawler.keys import Keys
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.stathat.flusher import Flusher
from crawler.store import connect as store
from tests.interleaved_recorder import InterleavedRecorder
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.recorder_one_visit import probe
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
    fl = Flusher(client, keys, s, chunk=40, tracked=QueueView(client, keys).tracked)
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


def test_a_torrents_counters_stay_in_its_shard_and_an_ips_place_counts_in_the_ips(
        client, namespace, settings, locator):
    keys = Keys(namespace, 3)
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(TORRENTS[0], POOL[:200], T0) == 200
    mine = int(TORRENTS[0], 16) % 3
    parts = [int(client.zscore(s.index("all", ("torrents",)), TORRENTS[0]) or 0) for s in keys.all_shards]
    assert parts[mine] == 200 and sum(parts) == 200
    assert [bool(client.exists(s.index("all", ("countries", "t", TORRENTS[0])))) for s in keys.all_shards] == [
        i == mine for i in range(3)]
    # the place counts wait in the rollup outbox of each IP's shard: spread, and each IP in one
    places = []
    for s in keys.all_shards:
        box = client.hgetall(s.rollup_outbox)
        places.append(sum(int(n) for f, n in box.items() if f[2:].startswith(b"2024-05:countries")))
    assert all(p > 30 for p in places)
    assert sum(places) == sum(r["count"] for r in top(client, keys, "countries", limit=1000)) == sum(
        r["count"] for r in top(client, keys, "countries", torrent=TORRENTS[0], limit=1000))
    # the home keeps no counter of its own
    assert not client.exists(keys.index("all", ("torrents",)))
    assert rec.record_visit(TORRENTS[0], POOL[:200], T0 + 60) == 0
    # the probe answers per IP in the visit's order, whatever shard each went to (a visit of as many
    # IPs as the one recorded: its roster is as wide, marks.roster_width)
    located = [(ipaddress.ip_address(ip).packed, locator.locate(ip)) for ip in POOL[190:210] + POOL[:180]]
    assert probe(rec, TORRENTS[0], located, T0 + 60) == "0" * 10 + "1" * 10 + "0" * 180
    one = Recorder(client, Keys(namespace + "-one"), settings, locator)
    try:
        one.record_visit(TORRENTS[0], POOL[:200], T0)
        assert probe(one, TORRENTS[0], located, T0 + 60) == probe(rec, TORRENTS[0], located, T0 + 60)
    finally:
        delete_namespace(client, namespace + "-one")


def test_the_sweep_walks_every_shards_buckets(client, namespace, settings, locator):
    keys = Keys(namespace, 3)
    rec = Recorder(client, keys, settings, locator, mark_buckets=48)  # 16 per shard
    rec.record_visit(TORRENTS[0], POOL[:300], T0)
    rec.record_visit(TORRENTS[1], POOL[:300], T0 + 40 * 86400)  # the first visit's marks expire

    def marks():
        # a set: SCAN may return a key twice while the shared server rehashes its keyspace
        found = {k for s in keys.all_shards for k in client.scan_iter(match=s.mark_buckets_match)}
        return sum(client.strlen(k) // 12 for k in found)

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
    folds, _ = dying._fold_calls(taken)
    assert Rollup(client, keys).settle(everything=False) == 0  # the workers leave a young batch to its reader
    assert len(folds) > 4
    for script, k, a in folds[: len(folds) // 2]:  # then it dies: half the chunks added, no batch ended
        script(keys=k, args=a)
    rec.record_visit(TORRENTS[0], POOL[500:520], T0 + 9)  # a fresh outbox meanwhile
    assert Rollup(client, keys).settle() > 0
    for script, k, a in folds:  # the dead reader's calls, replayed late: each refused
        assert script(keys=k, args=a) == 0
    Rollup(client, keys).settle()
    want = expected(locator, [(h, POOL[i * 100 : i * 100 + 250]) for i, h in enumerate(TORRENTS)]
                    + [(TORRENTS[0], POOL[500:520])])
    assert every_counter(client, keys) == dict(want)


def every_counter(client, keys) -> dict:
    """Every lifetime counter of ``TORRENTS`` as ``stats`` reads it: metric -> count."""
    got = {}
    for fam in ("countries", "cities", "postcodes"):
        got.update({r["metric"]: r["count"] for r in top(client, keys, fam, limit=10_000)})
        for h in TORRENTS:
            got.update({r["metric"]: r["count"] for r in top(client, keys, fam, torrent=h, limit=10_000)})
    got.update({r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=10_000)})
    return got


def test_a_batch_ended_and_replaced_while_read_is_not_added_under_its_old_number(client, namespace, settings, locator):
    keys = Keys(namespace, 2)
    rec = Recorder(client, keys, settings, locator)
    rec.record_visit(TORRENTS[0], POOL[:100], T0)
    r = Rollup(client, keys)
    (first,) = [t for t in r._take_all([0, 1])[0] if t[0] == 0]
    src, batch = first[0], first[1]
    r._fold_all([first])  # another reader adds and ends it...
    rec.record_visit(TORRENTS[1], POOL[100:200], T0 + 1)  # new IPs: new place counts
    (second,) = r._take_all([src])[0]  # ...and the next batch is in flight
    assert second[1] == batch + 1
    assert r._read([(src, batch, False)]) == []  # a slow reader of the first batch reads nothing
    r.settle()
    assert top(client, keys, "countries", limit=5) == top(client, keys, "countries", limit=5, settled=True)
    assert every_counter(client, keys) == dict(expected(locator, [(TORRENTS[0], POOL[:100]),
                                                                  (TORRENTS[1], POOL[100:200])]))


@pytest.mark.parametrize("held", [60, 300])
def test_a_recording_killed_mid_visit_then_retried_counts_once_across_shards(
        held, redis_url, namespace, client, settings, tmp_path):
    """SIGKILLed among its place calls (60 commands) or its torrent calls (300: 196 place
    calls ran first, then 225 torrent calls follow), then retried: every counter equals the truth."""
    db = write_city_db(tmp_path / "city.mmdb")
    keys = Keys(namespace, 3)
    h = TORRENTS[0]
    record_until_killed(redis_url, held, namespace, db, h, POOL, shards=3, now=T0)
    before = index_count(client, keys, "all", ("torrents",), h)
    places = sum(r["count"] for r in top(client, keys, "countries", limit=1000))
    want = expected(geo.open_locator(db), [(h, POOL)])
    assert 0 < places + before and before < len(POOL), "the kill should land mid-visit"
    assert (before > 0) == (held == 300) and (places < sum(
        n for m, n in want.items() if m.startswith("countries.") and m.count(".") == 2)) == (held == 60)
    rec = Recorder(client, keys, settings.replace(stathat_ezkey="k"), geo.open_locator(db), batch_pairs=7)
    assert rec.record_visit(h, POOL, T0 + 5) == len(POOL) - before
    assert every_counter(client, keys) == dict(want)
    box = Counter()
    for s in keys.all_shards:
        box.update({k.decode(): int(v) for k, v in client.hgetall(s.outbox).items()})
    assert dict(box) == {m: c for m, c in want.items() if m.startswith("countries.")}


@pytest.mark.interpreted
def test_a_visit_that_dies_between_its_place_and_torrent_parts_counts_the_rest_once(
        client, namespace, settings, locator):
    """The place calls ran, the torrent call did not: the retry counts the torrent's metrics
    only, and a revisit within the window counts nothing."""
    keys = Keys(namespace, 4)
    rec = InterleavedRecorder(client, keys, settings, locator, batch_pairs=50)

    def die():
        raise RuntimeError("killed")

    rec.after_places = die
    with pytest.raises(RuntimeError):
        rec.record_visit(TORRENTS[2], POOL[:300], T0)
    assert index_count(client, keys, "all", ("torrents",), TORRENTS[2]) == 0
    assert sum(r["count"] for r in top(client, keys, "countries", limit=1000)) > 0
    rec.after_places = None
    assert rec.record_visit(TORRENTS[2], POOL[:300], T0 + 10) == 300
    assert rec.record_visit(TORRENTS[2], POOL[:300], T0 + 20) == 0
    assert probe(rec, TORRENTS[2], [(ipaddress.ip_address(ip).packed, locator.locate(ip)) for ip in POOL[:300]],
                 T0 + 30) == "0" * 300
    assert every_counter(client, keys) == dict(expected(locator, [(TORRENTS[2], POOL[:300])]))


@pytest.mark.interpreted
def test_a_process_skips_the_place_calls_of_ips_whose_place_marks_it_knows_are_fresh(
        client, namespace, settings, locator):
    """Peers seen in one swarm, then in others: no place call until the first sighting's place
    marks expire, every counter exact throughout, and another process makes its own calls."""
    keys = Keys(namespace, 3)
    rec = InterleavedRecorder(client, keys, settings, locator)
    calls = []
    rec.after_places = lambda: calls.append(1)
    rec.record_visit(TORRENTS[0], POOL[:200], T0)
    assert len(calls) == 1
    rec.record_visit(TORRENTS[1], POOL[:200], T0 + 60)  # the same peers in another swarm
    rec.record_visit(TORRENTS[2], POOL[100:300], T0 + 120)  # half of them new
    assert len(calls) == 2
    other = InterleavedRecorder(client, keys, settings, locator)
    other.after_places = lambda: calls.append(2)
    other.record_visit(TORRENTS[3], POOL[:50], T0 + 180)
    assert calls == [1, 1, 2]
    want = expected(locator, [(TORRENTS[0], POOL[:200]), (TORRENTS[1], POOL[:200]), (TORRENTS[2], POOL[100:300]),
                              (TORRENTS[3], POOL[:50])])
    assert every_counter(client, keys) == dict(want)
    # a window later every place mark has expired: the peers count again, through place calls
    later = T0 + rec.window + 200
    assert rec.record_visit(TORRENTS[1], POOL[:100], later) == 100
    assert calls[-1] == 1 and len(calls) == 4
    month = month_of(later)
    got = {r["metric"]: r["count"] for r in top(client, keys, "countries", month=month, limit=100)}
    assert got == {m + "." + month: n for m, n in expected(locator, [(TORRENTS[1], POOL[:100])]).items()
                   if m.startswith("countries.") and m.count(".") == 2}


@pytest.mark.parametrize("shards", [16, 1024])
@pytest.mark.parametrize("flat", [False, True], ids=["skewed", "flat"])
def test_rankings_over_many_names_are_exact(client, namespace, flat, shards):
    """Thousands of torrents, each in its shard, and thousands of cities whose counts are
    spread over the shards' rollup outboxes, counts skewed or all alike: the first N by
    (count, name) are exactly those of the sums."""
    keys = Keys(namespace, shards)
    rng = random.Random(3)
    torrents = [f"{rng.getrandbits(160):040x}" for _ in range(3000)]
    cities = [f"City {i}" for i in range(3000)]
    want_t: Counter = Counter()
    want_c: Counter = Counter()
    pipe = client.pipeline(transaction=False)
    for i, (h, city) in enumerate(zip(torrents, cities)):
        n = 1 if flat else rng.randint(1, 1 + 3000 // (i + 1))
        want_t[h] += n
        pipe.zincrby(keys.counter_shard(int(h, 16) % shards).index("all", ("torrents",)), n, h)
        for s in rng.sample(range(shards), 1 if flat else rng.randint(1, 4)):
            n = 1 if flat else rng.randint(1, 1 + 3000 // (i + 1))
            want_c[city] += n
            # the rollup outbox as places.lua writes it
            pipe.hincrby(keys.shard(s).rollup_outbox, outbox_field("2024-05", ("cities", "c", "Germany"), city), n)
    pipe.execute()
    for want, fam in ((want_t, "torrents"), (want_c, "cities")):
        ranked = sorted(want.items(), key=lambda kv: (-kv[1], kv[0].encode()))
        for limit in (1, 20, 137, 5000):
            got = [(r["metric"].split(".")[1 if fam == "torrents" else 3], r["count"])
                   for r in top(client, keys, fam, country=None if fam == "torrents" else "Germany", limit=limit)]
            assert got == ranked[:limit], (fam, limit)
    assert sum(index_count(client, keys, "all", ("torrents",), h) for h in torrents[:50]) == sum(
        want_t[h] for h in torrents[:50])
    assert index_count(client, keys, "2024-05", ("cities", "c", "Germany"), cities[7]) == want_c[cities[7]]


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
