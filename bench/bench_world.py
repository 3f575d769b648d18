"""A crawl of a world like the real one, on loopback: what one worker costs each tracker and the DHT, and what it counts.

Usage: python bench/bench_world.py [--quick] [--torrents 300] [--empty 0.7] [--dht-only 6]
                                   [--revisit 60] [--steady-minutes 6] [--code DIR]

The world (bench/world_build.py): 10 opentrackers, 6 WebTorrent
bittorrent-trackers, a slow tracker and 20 dead ports, 54 URLs; each
torrent names 5 to 30 of them, by popularity; ``--empty`` of the swarms
have nobody, ``--dht-only`` have peers on a 16-node libtorrent DHT swarm
only, the rest have loopback peers announced straight into a few of the
trackers they name (so the trackers disagree). Every tracker but the dead
HTTP ports sits behind a tap (bench/world_taps.py) that counts what it
receives and makes announce replies state ``--revisit`` as their interval.

One ``peercrawl worker`` process (the real command line, a subprocess, its
default concurrency, a namespace of its own on ``--redis-url``, the DHT on
with the swarm as its bootstrap, no default trackers), run from ``--code``
(default: the working directory, so ``compare.py --bench-from-head`` runs
this file against an older tree's code), in two parts:

- ``first_pass``: every torrent added at once and visited once (``--until-idle``,
  a revisit of a day);
- ``steady``: a fresh namespace, the torrents added in 12 slices over one
  revisit interval (so their due times spread as a catalogue's do), revisited
  every ``--revisit`` s and measured over ``--steady-minutes`` whole minutes
  from the first minute after one interval and 5 s (``--quick``: 2 minutes,
  and 200 torrents).

Printed per part and tracker: what it received by face and kind, counted at
its tap (``outside``; opentrackers' own statistics page beside it) and by
the worker (``worker``: its request counts in Redis, crawler/sources/request_counts.py),
the kinds where they differ; hashes per UDP scrape packet and per HTTP
scrape; requests per visit of a torrent naming it and per minute. Per part:
visits/s; DHT lookups and BEP 33 scrapes (the worker's counts) and the
``get_peers`` the swarm's nodes received, per visit; tracker requests per
empty-swarm visit per tracker the torrent names (a scrape's cost split
evenly over the hashes it carried, connects by the same shares; dead HTTP
ports by the visits' share); and the unique IPs counted per torrent
(``peercrawl stats torrents --json``) against the truth.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import libtorrent as lt
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from world_build import DHT_LISTEN, World, servers, torrents
from world_figures import part_figures, targets

from crawler.keys import Keys
from crawler.sources.request_counts import Tally
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace

PLACES = {"127.2.0.0/16": ("Germany", "Berlin", "10115"), "127.0.0.0/24": ("Iceland", None, None)}
SWARM_SIZE = 16


class Cli:
    """The ``peercrawl`` of the code tree ``code``, with ``env``."""

    def __init__(self, code: Path, env: dict[str, str]):
        self.code, self.env = code, env

    def argv(self, *args: str) -> list[str]:
        """The command line of ``peercrawl ARGS``."""
        return [sys.executable, "-m", "crawler", *args]

    def run(self, *args: str) -> str:
        """Run ``peercrawl ARGS`` to its end; its stdout. Raises RuntimeError naming its last stderr line."""
        p = subprocess.run(self.argv(*args), cwd=self.code, env=self.env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"peercrawl {args[0]} exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
        return p.stdout


def worker_env(a, ns: str, tmp: Path, world: World, db: Path, revisit: float) -> dict[str, str]:
    """The worker's environment: this process's, without any peercrawl setting, and the world's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERCRAWL_", "STATHAT_", "GEOIP_", "REDIS_"))}
    env.update(REDIS_URL=a.redis_url, PEERCRAWL_NAMESPACE=ns, PEERCRAWL_DATA_DIR=str(tmp / ns),
               PEERCRAWL_SECRET="bench-world-secret-0123456789", PEERCRAWL_ALLOW_PRIVATE="1", PEERCRAWL_TRACKERS="",
               PEERCRAWL_DHT="on", PEERCRAWL_DHT_LISTEN=DHT_LISTEN,
               PEERCRAWL_DHT_BOOTSTRAP=",".join(f"{ip}:{port}" for ip, port in world.swarm.endpoints[:4]),
               PEERCRAWL_REVISIT_SECONDS=str(revisit), PEERCRAWL_TOP_TRACKERS="1000", GEOIP_DB=str(db),
               PEERCRAWL_LOG_LEVEL="warning", PEERCRAWL_LOG_FORMAT="json")
    return env


def magnets(world: World, items) -> list[str]:
    """One magnet line per torrent, naming its URLs."""
    return ["magnet:?xt=urn:btih:" + t.info_hash + "".join("&tr=" + urllib.parse.quote(u, safe="")
                                                          for u in world.url_list(t)) for t in items]


def _session_counters(session, timeout: float = 5.0) -> dict:
    session.post_session_stats()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        session.wait_for_alert(100)
        for alert in session.pop_alerts():
            if type(alert) is lt.session_stats_alert:
                return alert.values
    return {}


def ot_stats(port: int) -> dict[str, int]:
    """An opentracker's own counts of what it received (its statistics page)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?mode=everything", timeout=10) as r:
        page = r.read().decode()
    out = {}
    for proto in ("tcp", "udp"):
        block = re.search(rf"<{proto}>(.*?)</{proto}>", page, re.S).group(1)
        for k in ("connect", "announce", "scrape"):
            m = re.search(rf"<{k}>(\d+)</{k}>", block)
            if m:
                out[f"{proto}_{k}"] = int(m.group(1))
    return out


class Mark:
    """Every outside count at one instant, and each torrent's visits."""

    def __init__(self, world: World, client: redis.Redis, keys: Keys):
        self.t = time.time()
        with urllib.request.urlopen(f"http://127.0.0.1:{world.control}/stats", timeout=30) as r:
            self.taps = json.loads(r.read())
        self.ots = {name: ot_stats(ot.port) for name, ot in world.ots.items()}
        p = client.pipeline(transaction=False)
        for t in world.torrents:
            p.hget(keys.for_torrent(t.info_hash).torrent(t.info_hash), "visits")
        self.visits = {t.info_hash: int(v or 0) for t, v in zip(world.torrents, p.execute())}
        self.get_peers = sum(_session_counters(n).get("dht.dht_get_peers_in", 0) for n in world.swarm.nodes)


def tally(client: redis.Redis, keys: Keys, minutes: range) -> Tally:
    """The worker's request counts over ``minutes`` (unix minutes)."""
    return Tally([{k.decode(): int(v) for k, v in client.hgetall(keys.request_minute(m)).items()} for m in minutes])


def counted(cli: Cli, n: int) -> dict[str, int]:
    """Unique IPs counted per torrent, as ``peercrawl stats torrents --json`` prints them."""
    rows = json.loads(cli.run("stats", "torrents", "--json", "--limit", str(n + 50)))
    return {r["metric"].split(".")[1]: r["count"] for r in rows if r.get("metric")}


def start_worker(cli: Cli, log: Path, *args: str, under: tuple[str, ...] = ()) -> subprocess.Popen:
    """``peercrawl worker ARGS`` in the background, its stderr into ``log``; ``under``: a command it runs
    under (callgrind's)."""
    with open(log, "ab") as err:
        return subprocess.Popen([*under, *cli.argv("worker", *args)], cwd=cli.code, env=cli.env,
                                stdout=subprocess.DEVNULL, stderr=err)


def finish(proc: subprocess.Popen, timeout: float) -> int:
    """Wait for the worker; SIGTERM it past ``timeout`` (it drains), kill it if it lingers. Its exit status."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            return proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def worker_log(log: Path) -> dict:
    """How many lines the worker logged (warnings and up), and its last."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return {"lines": len(lines), "last": lines[-1][:300] if lines else None}


def first_pass(a, tmp: Path, world: World, client: redis.Redis, db: Path, ns: str) -> dict:
    """Every torrent added at once, visited once."""
    cli = Cli(a.code, worker_env(a, ns, tmp, world, db, 86400.0))
    keys = Keys(ns)
    src = tmp / f"{ns}.magnets"
    src.write_text("\n".join(magnets(world, world.torrents)) + "\n")
    cli.run("add", "--from", str(src))
    log = tmp / f"{ns}.log"
    before = Mark(world, client, keys)
    proc = start_worker(cli, log, "--until-idle")
    status = finish(proc, a.first_pass_timeout)
    after = Mark(world, client, keys)
    minutes = range(int(before.t) // 60, int(after.t) // 60 + 1)
    out = part_figures(world, before, after, tally(client, keys, minutes), counted(cli, len(world.torrents)))
    out.update(worker_exit=status, worker_log=worker_log(log))
    return out


def steady(a, tmp: Path, world: World, client: redis.Redis, db: Path, ns: str, minutes: int) -> dict:
    """The torrents trickled in over one revisit interval, revisited every ``a.revisit`` s, measured over
    ``minutes`` whole minutes."""
    cli = Cli(a.code, worker_env(a, ns, tmp, world, db, a.revisit))
    keys = Keys(ns)
    lines = magnets(world, world.torrents)
    random.Random(5).shuffle(lines)
    slices = 12
    files = []
    for i in range(slices):
        f = tmp / f"{ns}.{i}.magnets"
        f.write_text("\n".join(lines[i::slices]) + "\n")
        files.append(f)
    log = tmp / f"{ns}.log"
    t0 = time.time()
    m1 = math.ceil((t0 + a.revisit + 5) / 60) * 60
    m2 = m1 + 60 * minutes
    proc = start_worker(cli, log, "--duration", str(round(m2 - t0 + 1)))
    errors: list[str] = []

    def trickle() -> None:
        for i, f in enumerate(files):
            time.sleep(max(0.0, t0 + i * a.revisit / slices - time.time()))
            try:
                cli.run("add", "--from", str(f))
            except RuntimeError as e:
                errors.append(str(e))

    adder = threading.Thread(target=trickle)
    adder.start()
    time.sleep(max(0.0, m1 - time.time()))
    before = Mark(world, client, keys)
    time.sleep(max(0.0, m2 - time.time()))
    after = Mark(world, client, keys)
    status = finish(proc, 120)
    adder.join()
    out = part_figures(world, before, after, tally(client, keys, range(m1 // 60, m2 // 60)),
                       counted(cli, len(world.torrents)))
    out.update(worker_exit=status, worker_log=worker_log(log), revisit_s=a.revisit,
               measured=f"{minutes} whole minutes from {round(m1 - t0)} s after the worker started",
               due_visits_per_s=round(len(world.torrents) / a.revisit, 2), add_errors=errors)
    return out


def main() -> None:
    """Build the world, run both parts, print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--code", type=Path, default=Path.cwd(), help="the tree whose peercrawl runs (default: cwd)")
    ap.add_argument("--torrents", type=int, default=300)
    ap.add_argument("--empty", type=float, default=0.7)
    ap.add_argument("--dht-only", type=int, default=6)
    ap.add_argument("--opentrackers", type=int, default=10)
    ap.add_argument("--webtorrents", type=int, default=6)
    ap.add_argument("--dead", type=int, default=20)
    ap.add_argument("--slow-udp", type=float, default=3.5, help="seconds the slow tracker holds a UDP reply")
    ap.add_argument("--slow-http", type=float, default=9.0, help="seconds the slow tracker holds an HTTP reply")
    ap.add_argument("--revisit", type=float, default=60.0)
    ap.add_argument("--steady-minutes", type=int, default=6)
    ap.add_argument("--first-pass-timeout", type=float, default=600.0)
    ap.add_argument("--skip-steady", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--quick", action="store_true",
                    help="200 torrents at most, a steady crawl measured over 2 minutes instead of 6: about 5 min")
    a = ap.parse_args()
    a.code = a.code.resolve()
    minutes = 2 if a.quick else a.steady_minutes
    if a.quick:
        a.torrents = min(a.torrents, 200)
    rng = random.Random(a.seed)
    world_servers = servers(a.opentrackers, a.webtorrents, a.dead)
    items = torrents(world_servers, a.torrents, a.empty, a.dht_only, SWARM_SIZE, rng)
    client = redis.Redis.from_url(a.redis_url)
    run = f"{time.time_ns() % 10**9:09d}"
    code = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=a.code, capture_output=True, text=True)
    out: dict = {"code": code.stdout.strip() or str(a.code)}
    with tempfile.TemporaryDirectory(prefix="bench-world-") as tmpdir:
        tmp = Path(tmpdir)
        db = write_city_db(tmp / "city.mmdb", PLACES)
        world = World(tmp, world_servers, items, int(a.revisit), a.slow_udp, a.slow_http, SWARM_SIZE)
        try:
            t = time.monotonic()
            world.start()
            out["world"] = describe(world, a)
            out["world"]["start_s"] = round(time.monotonic() - t, 1)
            for part, suffix in (("first_pass", "a"), ("steady", "b")):
                if part == "steady" and a.skip_steady:
                    continue
                ns = f"benchworld{run}{suffix}"
                try:
                    out[part] = (first_pass(a, tmp, world, client, db, ns) if part == "first_pass"
                                 else steady(a, tmp, world, client, db, ns, minutes))
                finally:
                    delete_namespace(client, ns)
        finally:
            world.stop()
    out["targets"] = targets(out)
    print(json.dumps(out, indent=2))


def describe(world: World, a) -> dict:
    """The world in numbers."""
    kinds: dict[str, int] = {}
    for s in world.servers:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    per = [len(t.endpoints) for t in world.torrents]
    by_kind: dict[str, int] = {}
    for t in world.torrents:
        by_kind[t.kind] = by_kind.get(t.kind, 0) + 1
    return {"torrents": len(world.torrents), "torrents_by_kind": by_kind, "trackers_by_kind": kinds,
            "urls": sum(len(s.urls) for s in world.servers), "urls_per_torrent_mean": round(sum(per) / len(per), 1),
            "peers_truth": sum(len(t.truth(world.swarm.ips)) for t in world.torrents),
            "revisit_s": a.revisit, "slow_udp_s": a.slow_udp, "slow_http_s": a.slow_http, "dht_nodes": SWARM_SIZE}


if __name__ == "__main__":
    main()
