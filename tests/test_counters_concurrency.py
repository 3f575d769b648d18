"""Many processes recording at once, and a recorder killed mid-batch, on the real Redis."""

from __future__ import annotations

import calendar
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

import geo
from crawler.counters import Recorder, metrics_for, top
from tests.holding_proxy import kill_when_held
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


RECORDING_CHILD = textwrap.dedent(
    """
    import json, sys, redis, geo
    from crawler.counters import Recorder
    from crawler.keys import Keys
    from crawler.settings import Settings
    url, ns, db, now = sys.argv[1:5]
    visits = json.loads(sys.stdin.readline())
    s = Settings(redis_url=url, namespace=ns, secret="test-secret-0123456789", stathat_ezkey="k")
    rec = Recorder(redis.Redis.from_url(url), Keys(ns), s, geo.open_locator(db), batch_pairs=50)
    print("ready", flush=True)
    sys.stdin.readline()  # "go": every process starts at once
    print(sum(rec.record_visit(h, ips, float(now)) for h, ips in visits), flush=True)
    """
)


def test_many_processes_count_each_distinct_ip_exactly_once(redis_url, namespace, client, keys, tmp_path):
    db = write_city_db(tmp_path / "city.mmdb")
    rng = random.Random(7)
    plans = []
    for _ in range(4):
        visits = []
        for _ in range(6):
            visits.append((rng.choice(TORRENTS), rng.sample(POOL, 150)))
        plans.append(visits)
    # subprocess, not multiprocessing: gevent watches the children it starts
    # (the suite runs patched), so their exit status is never lost to its
    # SIGCHLD handler, which reaps every child.
    procs = [subprocess.Popen([sys.executable, "-c", RECORDING_CHILD, redis_url, namespace, str(db), str(T0)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
             for _ in plans]
    try:
        for p, plan in zip(procs, plans):
            p.stdin.write(json.dumps(plan) + "\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.close()
        news = []
        for p in procs:
            news.append(int(p.stdout.read()))
            assert p.wait(60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
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
    shards = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    s = Settings(redis_url=url, namespace=ns, secret="test-secret-0123456789", stathat_ezkey="k")
    rec = Recorder(redis.Redis.from_url(url), Keys(ns, shards), s, geo.open_locator(db), batch_pairs=7)
    ips = sys.stdin.read().split()
    print("ready", flush=True)
    rec.record_visit(h, ips, float(now))
    print("done", flush=True)
    """
)


def record_until_killed(redis_url: str, commands: int, namespace: str, db, h: str, ips: list[str],
                        shards: int = 1, now: float = T0) -> subprocess.Popen:
    """Run ``KILLED_CHILD`` recording ``ips`` on ``h`` at ``now`` through a proxy that passes its
    first ``commands`` Redis commands and holds the rest, and SIGKILL it there; the dead child."""
    def start(url: str) -> subprocess.Popen:
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_CHILD, url, namespace, str(db), h, str(now), str(shards)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
        )
        child.stdin.write("\n".join(ips))
        child.stdin.close()
        assert child.stdout.readline().strip() == "ready"
        return child

    return kill_when_held(redis_url, commands, start)


@pytest.mark.parametrize("attempt", range(3))
def test_sigkill_mid_visit_then_retry_never_double_counts(attempt, redis_url, namespace, client, keys, settings, tmp_path):
    db = write_city_db(tmp_path / "city.mmdb")
    h = TORRENTS[attempt]
    ips = POOL  # 600 IPs, one IP per Lua batch: ~600 round trips
    # The child reaches Redis through a proxy that passes its first n commands
    # (a different n each attempt, of ~440: a few to connect, the probe, then
    # one pipelined record.lua call per IP) and holds the rest: Redis has run
    # a prefix of the visit's pipeline when the child is killed, however fast
    # the machine is.
    child = record_until_killed(redis_url, 50 + 150 * attempt, namespace, db, h, ips)
    users = keys.index("all", ("torrents",))
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
