"""Many processes recording at once, and a recorder killed mid-batch, on the real Redis."""

from __future__ import annotations

import calendar
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
import redis

import geo
from crawler.counters import Recorder, metrics_for, top
from crawler.keys import Keys
from tests.mmdb import write_city_db

T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
TORRENTS = ["ab" * 20, "cd" * 20, "ef" * 20]
# 1.1.1.x München, 1.1.2.x Berlin, 2.2.2.x St. Louis, 4.4.4.x Iceland, 9.9.9.x unmapped
POOL = [f"{net}.{n}" for net in ("1.1.1", "1.1.2", "2.2.2", "4.4.4", "9.9.9") for n in range(1, 121)]


def all_counters(client, keys) -> dict:
    """Every lifetime counter, read through the stats indexes."""
    out = {}
    for fam in ("countries", "cities", "postcodes"):
        out.update({r["metric"]: r["count"] for r in top(client, keys, fam, limit=100_000)})
        for h in TORRENTS:
            out.update({r["metric"]: r["count"] for r in top(client, keys, fam, torrent=h, limit=100_000)})
    out.update({r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=100_000)})
    return out


def expected(locator, visits) -> Counter:
    """Distinct IPs per metric over ``visits`` of (info_hash, ips)."""
    pairs = set()
    for h, ips in visits:
        for ip in ips:
            p = locator.locate(ip)
            for m in metrics_for(h, p.country, p.city, p.postcode):
                pairs.add((m.name, ip))
    return Counter(name for name, _ in pairs)


def _worker(redis_url, namespace, settings, db, visits, start, result):
    client = redis.Redis.from_url(redis_url)
    rec = Recorder(client, Keys(namespace), settings, geo.open_locator(db), batch_pairs=50)
    start.wait(30)
    new = 0
    for h, ips in visits:
        new += rec.record_visit(h, ips, T0)
    result.put(new)


def test_many_processes_count_each_distinct_ip_exactly_once(redis_url, namespace, client, keys, settings, tmp_path):
    db = write_city_db(tmp_path / "city.mmdb")
    s = settings.replace(stathat_ezkey="k")
    rng = random.Random(7)
    plans = []
    for _ in range(4):
        visits = []
        for _ in range(6):
            visits.append((rng.choice(TORRENTS), rng.sample(POOL, 150)))
        plans.append(visits)
    ctx = mp.get_context("spawn")
    start, result = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(redis_url, namespace, s, db, v, start, result)) for v in plans]
    for p in procs:
        p.start()
    start.set()
    news = [result.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    want = expected(geo.open_locator(db), [v for plan in plans for v in plan])
    got = all_counters(client, keys)
    assert got == dict(want)
    # §2's `new` summed over every process is each torrent's distinct IPs, once
    assert sum(news) == sum(c for m, c in want.items() if m.count(".") == 2 and m.startswith("torrents."))
    box = {k.decode(): int(v) for k, v in client.hgetall(keys.outbox).items()}
    assert box == {m: c for m, c in want.items() if m.startswith("countries.")}


KILLED_CHILD = textwrap.dedent(
    """
    import sys, redis, geo
    from crawler.counters import Recorder
    from crawler.keys import Keys
    from crawler.settings import Settings
    url, ns, db, h, now = sys.argv[1:6]
    s = Settings(redis_url=url, namespace=ns, secret="test-secret-0123456789", stathat_ezkey="k")
    rec = Recorder(redis.Redis.from_url(url), Keys(ns), s, geo.open_locator(db), batch_pairs=7)
    ips = sys.stdin.read().split()
    print("ready", flush=True)
    rec.record_visit(h, ips, float(now))
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("attempt", range(3))
def test_sigkill_mid_visit_then_retry_never_double_counts(attempt, redis_url, namespace, client, keys, settings, tmp_path):
    db = write_city_db(tmp_path / "city.mmdb")
    h = TORRENTS[attempt]
    ips = POOL  # 600 IPs, one IP per Lua batch: ~600 round trips
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, redis_url, namespace, str(db), h, str(T0)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
    )
    try:
        child.stdin.write("\n".join(ips))
        child.stdin.close()
        assert child.stdout.readline().strip() == "ready"
        users = keys.index("all", ("torrents",))
        deadline = time.monotonic() + 20
        threshold = 50 + 100 * attempt
        while (client.zscore(users, h) or 0) < threshold and time.monotonic() < deadline:
            time.sleep(0.002)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert child.returncode == -signal.SIGKILL
    before = int(client.zscore(users, h) or 0)
    assert 0 < before < len(ips), "the kill should land mid-visit"
    s = settings.replace(stathat_ezkey="k")
    rec = Recorder(client, keys, s, geo.open_locator(db), batch_pairs=7)
    assert rec.record_visit(h, ips, T0 + 5) == len(ips) - before
    want = expected(geo.open_locator(db), [(h, ips)])
    got = {m: c for m, c in all_counters(client, keys).items()}
    assert got == dict(want)
    box = {k.decode(): int(v) for k, v in client.hgetall(keys.outbox).items()}
    assert box == {m: c for m, c in want.items() if m.startswith("countries.")}
