"""What one visit costs, everything counted: a real ``peercrawl worker`` process on a Redis of its own.

Usage: python bench/bench_visit_cost.py [--quick] [--torrents 3000] [--concurrency 64|auto] [--overlap 4] [--stathat]
                                        [--mark-buckets N] [--code DIR] [--timeout 600] [--callgrind DIR]

The world, on loopback:

- one UDP opentracker (tests/opentracker.py; 200 peers at most per reply,
  the crawler asking for its default) tracking 3,000 torrents (``--quick``:
  300);
- every swarm 50 peers; the peers are ``torrents * 50 / --overlap`` distinct
  addresses (37,500 by default), address ``k`` being
  127.(10 + k % 10).(q // 250).(q % 250 + 1) with q = k // 10, so they spread
  evenly over the ten /16s 127.10.0.0 to 127.19.0.0; swarm ``i`` holds
  addresses ``(50 i + j) % addresses`` for j < 50, so every address is in
  ``--overlap`` (4) swarms, with one port; announced straight into
  opentracker as bench_worker's ``populate`` does;
- the crawl's mark buckets, 2^18 unless ``--mark-buckets`` says: a world this
  small leaves them nearly empty (~10 records each at 10,000 torrents), where
  a crawl of millions of torrents fills each with as many as it was sized
  for (~100) or more; fewer buckets here fill them so;
- a small GeoIP City database (tests/mmdb.write_city_db) placing each /16
  (eight countries, nine cities, eight postcodes: Iceland has neither city
  nor postcode, Yamoussoukro no postcode);
- a private ``redis-server`` (bench/cluster_nodes.py's single topology:
  Debian's, on a free port, in its own directory, ``--save ''
  --appendonly no``), so its CPU and command counts are this bench's alone;
- one ``peercrawl worker --until-idle --concurrency 64`` at a time (with
  ``--concurrency auto``: the pool's start, each resize and its end in
  ``pool``), a
  subprocess run from ``--code`` (default: the working directory, so
  ``compare.py --bench-from-head`` measures an older tree's code), with the
  DHT, metadata fetches and StatHat off (no ``STATHAT_EZKEY``), loopback
  trackers and peers allowed (``PEERCRAWL_ALLOW_PRIVATE``), a fixed
  ``PEERCRAWL_SECRET``, no default trackers (each torrent is added as a
  magnet naming the one tracker) and a revisit of a day. ``--stathat``:
  StatHat on, the worker's flusher posting to a loopback stand-in
  (tests/stathat_sink.py, in a process of its own), as a crawl runs it: the
  outbox's increments and ``torrents.processed`` in what a visit costs;
  ``world.stathat_increments``, what the stand-in accepted. ``--named``:
  metadata fetches on (``PEERCRAWL_METADATA``) and each magnet with a name
  (``dn``), as most torrents have once such a crawl has run: what a named
  torrent's visits cost the fetcher.

Runs, in order: two with no torrent at all (``startup``: the second one,
the first warming the file caches and the code's compiled files, its CPU
given as ``startup_cold_cpu_s``); ``first``: every torrent added, then one
worker visits each once (every IP new to its torrent); ``revisit``: every
torrent made due again with ``peercrawl add --due-now`` and a new worker
visits each once more (nothing new); ``churned``: every swarm gains one
peer never seen (an address past the world's), every torrent is made due
again and a new worker visits each once more: the swarms are not the ones
the revisit met, so no swarm record settles a visit, and one IP a visit
counts.

Per run:

- ``visits``, ``failed`` (the worker's own counts, from its
  ``worker_stopped`` log line) and ``torrents_visited`` (torrents whose
  ``visits`` field grew by one);
- ``wall_s``: from the subprocess's start to its exit; ``startup_s`` to its
  ``worker_started`` line, ``visiting_s`` from there to ``worker_idle``
  (its first claim to the end of its last visit), ``stop_s`` from there to
  its exit. ``visits_per_s``: visits / visiting_s; ``visits_per_s_wall``:
  visits / wall_s; ``visits_per_s_steady``: the middle 80 % of the visits
  (by the ``last_visit`` time each torrent records) over the time they took;
- ``worker_cpu_ms_per_visit``: the subprocess's user + system CPU
  (``getrusage(RUSAGE_CHILDREN)`` around it: exact, children included) over
  its visits, start-up and shutdown included; ``..._less_startup`` takes the
  ``startup`` run's CPU off first: the figure read both ways;
- ``worker_cpu_per_visit_in_calibrations`` and ``redis_..._in_calibrations``:
  the same CPU over the bench's own fixed piece of Python timed just before
  and after the pass (``calibration``): this machine's speed moves by half
  within minutes, and the ratio of two such figures moves less;
- ``redis_cpu_ms_per_visit``: the private server's INFO cpu delta;
  ``redis_commands_per_visit``: INFO commandstats calls, summed. Redis
  counts each command a Lua script calls as well as the EVALSHA itself
  (``total_commands_processed`` does too), so this is not round trips:
  ``redis_scripts_per_visit`` gives the script calls apart;
  ``redis_top_commands``: the five most called, with calls and
  microseconds per visit (an EVALSHA's time includes its commands');
  ``redis_top_commands_by_time``: the eight with the most microseconds, so
  the commands the scripts call show beside the scripts' own time;
  ``redis_in_bytes_per_visit`` / ``redis_out_bytes_per_visit``:
  INFO stats' total_net_input_bytes / total_net_output_bytes. The bench's own
  INFO calls that fall between its two readings (three) are taken off the counts;
  their replies (a few KB) stay in the bytes;
- ``opentracker_cpu_ms_per_visit`` (its /proc stat, 10 ms ticks);
- ``cores_busy``: (worker + Redis + opentracker CPU) / wall_s, and each part;
- the time a visit holds its slot, ``slot_s``: p50, p99 and mean of the
  worker's own ``slot`` stage (workers/visit_stages.py: each visit's time
  from the hand-out of its torrent to a runner until the runner holds its
  next, every stage summed per visit; buckets of 9 %, a bucket's midpoint
  given; a tree whose worker logs no such stage gives None); ``stages``:
  each stage apart, as the worker logged them when it stopped;
  ``round_trip_s``: the queue's own round-trip histogram over the run
  (crawler/queue/rates.py: from the claim to the completion's send, visits
  some source answered only; ``status`` shows it); and ``slot_s_little``:
  concurrency / visits_per_s_steady (Little's law: the mean time a slot is
  taken per visit, which also counts a slot left empty as taken);
- ``recording_batches`` and ``peers_per_recording_batch``: how the visits'
  recordings were shared (crawler/counters/batcher.py), and ``swarms_known``:
  the visits their swarm record settled (crawler/counters/swarm_record.py),
  and ``visits_per_completion_batch`` (workers/completions.py), from
  ``worker_stopped``;
- ``counts_exact``: ``peercrawl stats torrents --json`` after the run shows
  exactly 50 unique IPs for every torrent (after ``revisit``: and the same
  counts as after ``first``; after ``churned``: 51).

The ``startup`` run has no visit: its figures are totals, under the same
names without ``_per_visit``.

``--callgrind DIR``: every worker runs under valgrind's callgrind (its
output files into DIR, ``PYTHONHASHSEED=0``), and each run gains
``instructions_per_visit`` and ``instructions_per_visit_less_startup`` (the
second start-up run's count taken off): the worker's whole cost in
user-space instructions, a figure the machine's speed does not move (three
runs of 2,000 torrents: a revisit's within 0.7 % of each other, a first
visit's within 7 %, its batches' shapes following the timing; the start-up's
within 0.5 %). Under callgrind the worker runs ~40x slower
while Redis and the tracker do not, so its batches are smaller than a real
worker's (a first pass's recording batch ~450 peers, not ~800): read its
instructions against another count, and none of its CPU or time figures.

How this differs from bench_worker: bench_worker runs the worker's Process
inside the bench (gevent-patched), on the shared Redis, and reports Python
CPU over the visiting span only (first claim to last visit) and round trips
counted at redis-py. Here the worker is the real command line, a process of
its own whose every CPU second is counted (interpreter start, imports,
Redis connection, services, shutdown), on a Redis nobody else uses, so the
Redis CPU, commands and bytes are all the worker's.

Prints one JSON object: ``world``, ``startup``, ``first``, ``revisit``,
``churned``, ``counts_exact``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import swarms
from bench_instructions import callgrind, instructions
from bench_world import Cli, counted, finish, start_worker
from cluster_nodes import Topology
from redis_cpu import redis_cpu

from crawler.keys import Keys
from crawler.queue.rates import middle, percentile
from crawler.store import layout
from tests.mmdb import write_city_db
from tests.opentracker import OpenTracker
from tests.stathat_sink import StatHatSinkProcess

SWARM = 50
SUBNETS = 10  # 127.10.0.0/16 to 127.19.0.0/16
ADDRESSES = SUBNETS * 256 * 250  # ``address(k)`` for k below this: 250 hosts in each /24 of the ten /16s
PLACES = {
    "127.10.0.0/16": ("Germany", "Berlin", "10115"),
    "127.11.0.0/16": ("Germany", "München", "80331"),
    "127.12.0.0/16": ("Japan", "東京", "100-0001"),
    "127.13.0.0/16": ("Brasil", "São Paulo", "01000-000"),
    "127.14.0.0/16": ("Iceland", None, None),
    "127.15.0.0/16": ("United States", "St. Louis", "63101"),
    "127.16.0.0/16": ("United States", "New York", "10001"),
    "127.17.0.0/16": ("France", "Paris", "75001"),
    "127.18.0.0/16": ("India", "Mumbai", "400001"),
    "127.19.0.0/16": ("Côte d'Ivoire", "Yamoussoukro", None),
}
SECRET = "bench-visit-cost-secret-0123456789"
REVISIT_SECONDS = 86400.0
# INFO calls one Mark makes; the three of one mark and the next are in a run's deltas.
INFO_CALLS = 3
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def address(k: int) -> str:
    """The ``k``-th peer address: 127.(10 + k % 10).x.y, consecutive addresses in turn in the ten /16s."""
    q = k // SUBNETS
    return f"127.{10 + k % SUBNETS}.{q // 250}.{q % 250 + 1}"


def worker_env(url: str, ns: str, tmp: Path, db: Path, concurrency: int | str, named: bool = False,
               mark_buckets: int | None = None, stathat: str | None = None) -> dict[str, str]:
    """The worker's environment: this process's, without any peercrawl setting, and this bench's
    (``mark_buckets``: the crawl's ``PEERCRAWL_MARK_BUCKETS``, None: its default; ``stathat``: the URL
    of the loopback StatHat its flusher posts to, None: StatHat off).

    Without ``PYTHONDONTWRITEBYTECODE`` as well: the warming run writes the code's compiled files, as
    an installed package has them, so no run pays for compiling the source (a fifth of a start-up)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PEERCRAWL_", "STATHAT_", "GEOIP_", "REDIS_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(REDIS_URL=url, PEERCRAWL_NAMESPACE=ns, PEERCRAWL_DATA_DIR=str(tmp / ns), PEERCRAWL_SECRET=SECRET,
               PEERCRAWL_ALLOW_PRIVATE="1", PEERCRAWL_TRACKERS="", PEERCRAWL_DHT="off",
               PEERCRAWL_METADATA="on" if named else "off",
               PEERCRAWL_PROCESSES="1",
               PEERCRAWL_REVISIT_SECONDS=str(REVISIT_SECONDS), GEOIP_DB=str(db),
               PEERCRAWL_LOG_LEVEL="info", PEERCRAWL_LOG_FORMAT="json")
    if concurrency != "auto":
        env.update(PEERCRAWL_CONCURRENCY=str(concurrency))
    if mark_buckets is not None:
        env.update(PEERCRAWL_MARK_BUCKETS=str(mark_buckets))
    if stathat is not None:
        env.update(STATHAT_EZKEY="bench", STATHAT_URL=stathat)
    return env


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class RedisMark:
    """The private Redis's counters at one instant: CPU, bytes in and out, commands."""

    def __init__(self, client: redis.Redis):
        self.cpu = redis_cpu(client)
        st = client.info("stats")
        self.net_in, self.net_out = int(st["total_net_input_bytes"]), int(st["total_net_output_bytes"])
        self.cmds = {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
                     for k, v in client.info("commandstats").items()}


def redis_figures(a: RedisMark, b: RedisMark, per: int) -> dict:
    """Redis's CPU, commands and bytes from ``a`` to ``b``, per visit (``per``: the visits, at least 1)."""
    delta = {}
    for name, (calls, usec) in b.cmds.items():
        c0, u0 = a.cmds.get(name, (0, 0))
        calls, usec = calls - c0, usec - u0
        if name == "info":
            calls -= INFO_CALLS
        if calls > 0:
            delta[name] = (calls, usec)
    top = sorted(delta.items(), key=lambda kv: -kv[1][0])[:5]
    by_time = sorted(delta.items(), key=lambda kv: -kv[1][1])[:8]
    return {
        "redis_cpu_ms_per_visit": round(1000 * (b.cpu - a.cpu) / per, 4),
        "redis_commands_per_visit": round(sum(c for c, _ in delta.values()) / per, 2),
        "redis_scripts_per_visit": round(sum(delta.get(s, (0, 0))[0] for s in SCRIPT_COMMANDS) / per, 2),
        "redis_top_commands": [{"command": name, "calls_per_visit": round(c / per, 3),
                                "usec_per_visit": round(u / per, 1)} for name, (c, u) in top],
        "redis_top_commands_by_time": [{"command": name, "calls_per_visit": round(c / per, 3),
                                        "usec_per_visit": round(u / per, 1)} for name, (c, u) in by_time],
        "redis_in_bytes_per_visit": round((b.net_in - a.net_in) / per),
        "redis_out_bytes_per_visit": round((b.net_out - a.net_out) / per),
        "_redis_cpu_s": b.cpu - a.cpu,
    }


def log_events(log: Path) -> dict:
    """The worker's ``worker_started``, ``worker_idle`` and ``worker_stopped`` lines (unix times and
    fields), and its warnings and errors: how many, and the last."""
    out: dict = {"warnings": 0, "last_warning": None}
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            out["warnings"] += 1
            out["last_warning"] = line[:300]
            continue
        if rec.get("event") == "pool_resized":  # --concurrency auto's decisions
            fields = ("size", "was", "why", "visits_per_s", "cpu", "lag_ms", "rtt_ms", "slot_ms")
            out.setdefault("pool", []).append({k: rec.get(k) for k in fields})
        if rec.get("event") in ("worker_started", "worker_idle", "worker_stopped"):
            rec["t"] = datetime.datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp()
            out[rec["event"]] = rec
        if rec.get("level") in ("warning", "error", "critical"):
            out["warnings"] += 1
            out["last_warning"] = line[:300]
    return out


def shard_keys(client: redis.Redis, ns: str) -> list[Keys]:
    """Every queue shard's keys of namespace ``ns`` (none before the namespace has a layout)."""
    record = layout.read(client, Keys(ns))
    return [] if record is None else list(layout.keys_of(ns, record).all_shards)


def round_trips(client: redis.Redis, ns: str) -> dict[str, int]:
    """The queue's round-trip histogram fields (``rt:<minute>:<bucket>``) over every shard, summed."""
    out: dict[str, int] = {}
    for k in shard_keys(client, ns):
        for f, v in client.hgetall(k.rates).items():
            f = f.decode()
            if f.startswith("rt:"):
                out[f] = out.get(f, 0) + int(v)
    return out


def slot_times(before: dict[str, int], after: dict[str, int]) -> dict:
    """p50, p99 and mean (of the buckets' midpoints) of the round trips recorded between ``before`` and ``after``."""
    hist: dict[int, int] = {}
    for f, n in after.items():
        d = n - before.get(f, 0)
        if d > 0:
            k = int(f.rsplit(":", 1)[1])
            hist[k] = hist.get(k, 0) + d
    p50, p99 = percentile(hist, 0.5), percentile(hist, 0.99)
    n = sum(hist.values())
    return {"visits": n, "p50": None if p50 is None else round(p50, 4),
            "p99": None if p99 is None else round(p99, 4),
            "mean": round(sum(middle(k) * c for k, c in hist.items()) / n, 4) if n else None}


def whole_slot(stages: dict | None) -> dict | None:
    """The worker's ``slot`` stage (each visit's whole time in its slot) in seconds, as ``slot_times``
    gives the round trips; None from a tree whose worker logs no such stage."""
    slot = (stages or {}).get("slot")
    if not slot:
        return None
    return {"visits": slot["visits"], **{k: round(slot[f"{k}_ms"] / 1000, 4) for k in ("p50", "p99", "mean")}}


def visit_fields(client: redis.Redis, ns: str, hashes: list[str]) -> list[tuple[int, float]]:
    """Each torrent's ``visits`` and ``last_visit`` (0 when missing)."""
    if not hashes:
        return []
    keys = shard_keys(client, ns)
    if not keys:
        return [(0, 0.0)] * len(hashes)
    home = layout.keys_of(ns, layout.read(client, Keys(ns)))
    p = client.pipeline(transaction=False)
    for h in hashes:
        p.hmget(home.for_torrent(h).torrent(h), "visits", "last_visit")
    return [(int(v or 0), float(t or 0.0)) for v, t in p.execute()]


def steady_rate(times: list[float]) -> float | None:
    """Visits per second over the middle 80 % of the completion ``times``; None with fewer than 20."""
    times = sorted(times)
    if len(times) < 20:
        return None
    i, j = len(times) // 10, len(times) - 1 - len(times) // 10
    return round((j - i) / max(times[j] - times[i], 1e-6), 1)


class Run:
    """One worker process to its exit, and the counters around it."""

    def __init__(self, cli: Cli, client: redis.Redis, ns: str, ot_pid: int, log: Path, concurrency: int | str,
                 hashes: list[str], timeout: float, profile: Path | None = None, callgrind_out: Path | None = None):
        self.cli, self.client, self.ns, self.ot_pid, self.log = cli, client, ns, ot_pid, log
        self.concurrency, self.hashes, self.timeout, self.profile = concurrency, hashes, timeout, profile
        self.callgrind_out = callgrind_out  # the worker under callgrind, its output there (``--callgrind``)

    def go(self) -> dict:
        """Run the worker; the raw figures (``figures`` makes them per visit)."""
        before_fields = visit_fields(self.client, self.ns, self.hashes)
        rt0 = round_trips(self.client, self.ns)
        ot0 = proc_cpu(self.ot_pid)
        r0 = RedisMark(self.client)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        before = calibration()
        t0, m0 = time.time(), time.monotonic()
        if self.profile is not None:
            self.client.slowlog_reset()
        proc = start_worker(self.cli, self.log, "--until-idle", "--concurrency", str(self.concurrency),
                            under=callgrind(self.callgrind_out) if self.callgrind_out is not None else ())
        spy = profiler(proc.pid, self.profile) if self.profile is not None else None
        status = finish(proc, self.timeout)
        wall = time.monotonic() - m0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r1 = RedisMark(self.client)
        ot1 = proc_cpu(self.ot_pid)
        rt1 = round_trips(self.client, self.ns)
        after_fields = visit_fields(self.client, self.ns, self.hashes)
        return {"t0": t0, "wall": wall, "calibration": (before + calibration()) / 2, "status": status, "redis": (r0, r1), "ot_cpu": ot1 - ot0,
                "worker_cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
                "worker_user": ru1.ru_utime - ru0.ru_utime, "worker_sys": ru1.ru_stime - ru0.ru_stime,
                "round_trip": slot_times(rt0, rt1), "events": log_events(self.log),
                "visited": [t for (v0, _), (v1, t) in zip(before_fields, after_fields) if v1 == v0 + 1],
                **({"profile": profile_figures(spy, self.profile, self.client)} if spy is not None else {}),
                **({"instructions": instructions(self.callgrind_out)} if self.callgrind_out is not None else {})}


# Commands the SLOWLOG keeps in a profiled run: every one of a full pass (~10 a visit).
SLOWLOG_LEN = 200_000


def profiler(pid: int, out: Path) -> subprocess.Popen:
    """py-spy sampling ``pid`` (every greenlet's stack is the one thread's) into ``out``, collapsed stacks."""
    beside = Path(sys.executable).parent / "py-spy"  # a virtual environment's, else the PATH's
    return subprocess.Popen([str(beside) if beside.exists() else "py-spy", "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
                             "--nonblocking", "--output", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def profile_figures(spy: subprocess.Popen, raw: Path, client: redis.Redis, top: int = 15) -> dict:
    """The worker's top frames (share of samples where the frame runs itself, and where it is on the
    stack) and Redis's slowest script calls (SLOWLOG, over 1 ms)."""
    try:
        spy.wait(30)
    except subprocess.TimeoutExpired:
        spy.kill()
    own: dict[str, int] = {}
    inside: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        total += int(n)
        own[frames[-1]] = own.get(frames[-1], 0) + int(n)
        for f in set(frames):
            inside[f] = inside.get(f, 0) + int(n)

    def share(d: dict[str, int]) -> list:
        return [[f, round(c / max(total, 1), 3)] for f, c in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    return {"samples": total, "own": share(own), "inside": share(inside), "redis_by_call": redis_calls(client)}


def script_names() -> dict[str, str]:
    """SHA1 -> name of every Lua script of the crawler, as it registers them (includes resolved)."""
    import hashlib

    from crawler.store.scripts import source

    out = {}
    for lua in sorted((ROOT / "crawler").rglob("*.lua")):
        package = ".".join(lua.parent.relative_to(ROOT).parts)
        out[hashlib.sha1(source(lua.stem, package).encode()).hexdigest()] = lua.stem
    return out


def redis_calls(client: redis.Redis) -> list:
    """Redis's time per kind of call over the run, from a SLOWLOG that kept every command (the script
    calls by script): calls, µs in all and per call, most time first."""
    names = script_names()
    by: dict[str, list[int]] = {}
    for e in client.slowlog_get(SLOWLOG_LEN):
        words = e["command"].split()
        name = (words[0].decode() if isinstance(words[0], bytes) else str(words[0])).upper() if words else "?"
        if name in ("EVALSHA", "EVALSHA_RO") and len(words) > 1:
            sha = words[1].decode() if isinstance(words[1], bytes) else str(words[1])
            name = names.get(sha, sha[:8]) + ".lua"
        got = by.setdefault(name, [0, 0])
        got[0] += 1
        got[1] += e["duration"]
    rows = sorted(by.items(), key=lambda kv: -kv[1][1])
    return [{"call": k, "calls": n, "us": us, "us_per_call": round(us / n, 1)} for k, (n, us) in rows[:12]]


def timing(raw: dict) -> dict:
    """The run's times from the worker's log lines: start-up, visiting span, stop."""
    ev = raw["events"]
    started, idle, stopped = (ev.get(e, {}).get("t") for e in ("worker_started", "worker_idle", "worker_stopped"))
    end = idle or stopped
    return {"wall_s": round(raw["wall"], 3),
            "startup_s": round(started - raw["t0"], 3) if started else None,
            "visiting_s": round(end - started, 3) if started and end else None,
            "stop_s": round(raw["t0"] + raw["wall"] - end, 3) if end else None}


def calibration() -> float:
    """CPU seconds of a fixed piece of Python (dicts, strings, tuples: a worker's kind of work), the least of
    five tries: what this machine's speed is at the moment, to read a pass's CPU against."""
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        d = {f"k{i}": (i, str(i)) for i in range(20_000)}
        sum(len(v[1]) for v in d.values())
        best = min(best, time.process_time() - t)
    return best


def cpu_figures(raw: dict, redis_cpu_s: float, per: int, startup_cpu: float | None) -> dict:
    """CPU per visit of the worker (with and without start-up) and opentracker; cores busy."""
    w, r, o, wall = raw["worker_cpu"], redis_cpu_s, raw["ot_cpu"], raw["wall"]
    cal = raw.get("calibration") or 0.0
    return {
        # in calibrations (``calibration``): a figure a machine whose speed drifts between passes moves less
        "worker_cpu_per_visit_in_calibrations": round(w / per / cal, 5) if cal else None,
        "redis_cpu_per_visit_in_calibrations": round(r / per / cal, 5) if cal else None,
        "worker_cpu_ms_per_visit": round(1000 * w / per, 4),
        "worker_cpu_ms_per_visit_less_startup": (None if startup_cpu is None
                                                 else round(1000 * (w - startup_cpu) / per, 4)),
        "opentracker_cpu_ms_per_visit": round(1000 * o / per, 4),
        "cpu_s": {"worker": round(w, 3), "worker_user": round(raw["worker_user"], 3),
                  "worker_sys": round(raw["worker_sys"], 3), "redis": round(r, 3), "opentracker": round(o, 3)},
        "cores_busy": round((w + r + o) / wall, 3),
        "cores_busy_parts": {"worker": round(w / wall, 3), "redis": round(r / wall, 3),
                             "opentracker": round(o / wall, 3)},
    }


def figures(raw: dict, concurrency: int | str, startup_cpu: float | None, startup_instructions: int | None = None
            ) -> dict:
    """The per-visit figures of one ``Run.go`` (a run without visits: its totals, ``_per_visit`` dropped;
    ``startup_instructions``: the start-up run's count under ``--callgrind``)."""
    ev = raw["events"]
    stopped = ev.get("worker_stopped", {})
    visits = int(stopped.get("visits", 0))
    per = max(visits, 1)
    out: dict = {"visits": visits, "failed": stopped.get("failed"), "torrents_visited": len(raw["visited"])}
    out.update(timing(raw))
    steady = steady_rate(raw["visited"])
    out.update(visits_per_s=round(visits / out["visiting_s"], 1) if visits and out["visiting_s"] else None,
               visits_per_s_wall=round(visits / raw["wall"], 1) if visits else None,
               visits_per_s_steady=steady)
    rf = redis_figures(*raw["redis"], per)
    out.update(cpu_figures(raw, rf.pop("_redis_cpu_s"), per, startup_cpu))
    out.update(rf)
    # where a visit holds its slot, stage by stage, as the worker logged it (workers/visit_stages.py);
    # an older tree's worker logs none
    out.update(stages=stopped.get("stages"))
    shared = stopped.get("recordings") or {}
    out.update(recording_batches=shared.get("batches"), swarms_known=shared.get("swarms_known"),
               peers_per_recording_batch=round(shared["peers"] / shared["batches"], 1) if shared.get("batches") else None)
    done = stopped.get("completions") or {}
    out.update(visits_per_completion_batch=round(done["visits"] / done["batches"], 1) if done.get("batches") else None)
    out.update(slot_s=whole_slot(stopped.get("stages")), round_trip_s=raw["round_trip"],
               slot_s_little=round(concurrency / steady, 4) if steady and isinstance(concurrency, int) else None,
               worker_exit=raw["status"], worker_warnings=ev["warnings"], worker_last_warning=ev["last_warning"])
    if "profile" in raw:
        out["profile"] = raw["profile"]
    if "instructions" in raw:  # the worker's, counted by callgrind (``--callgrind``)
        out["instructions_per_visit"] = round(raw["instructions"] / per)
        if startup_instructions is not None:
            out["instructions_per_visit_less_startup"] = round((raw["instructions"] - startup_instructions) / per)
    if concurrency == "auto":  # where the pool started, each resize, and where it ended
        started, resized = ev.get("worker_started", {}).get("concurrency"), ev.get("pool", [])
        out["pool"] = {"started": started, "resized": resized, "ended": resized[-1]["size"] if resized else started}
    if visits:
        return out
    # No visit: per visit is per 1, so the figures are the run's totals.
    return json.loads(json.dumps(out).replace("_per_visit", ""))


def pool_size(text: str) -> int | str:
    """``--concurrency``: a number of runners, or auto."""
    if text == "auto":
        return text
    try:
        return max(1, int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, not {text!r}") from None


def magnets(hashes: list[str], tracker: str, named: bool = False) -> str:
    """One magnet line per torrent, naming ``tracker`` (``named``: and a name of its own)."""
    tr = urllib.parse.quote(tracker, safe="")
    return "".join(f"magnet:?xt=urn:btih:{h}&tr={tr}" + (f"&dn=bench+{i}" if named else "") + "\n"
                   for i, h in enumerate(hashes))


def check_counts(cli: Cli, hashes: list[str], want: dict[str, int] | None = None,
                 size: int = SWARM) -> tuple[dict, dict]:
    """Unique IPs per torrent as ``stats torrents --json`` prints them, against ``size`` for every torrent
    (and ``want``, the counts of an earlier pass, when given)."""
    got = counted(cli, len(hashes))
    wrong = {h: got.get(h) for h in hashes if got.get(h) != size}
    changed = sum(1 for h in hashes if want is not None and got.get(h) != want.get(h))
    exact = not wrong and not changed and len(got) == len(hashes)
    return got, {"counts_exact": exact, "torrents_counted": len(got), "torrents_wrong": len(wrong),
                 "wrong_examples": dict(list(wrong.items())[:3]), "changed_since_first": changed}


def passes(a, tmp: Path, client: redis.Redis, url: str, ot: OpenTracker, db: Path, hashes: list[str],
           addresses: int) -> dict:
    """The start-up runs, the first pass, the revisit pass and the churned pass (``addresses``: the
    world's, after which the new peers' are)."""
    out: dict = {}
    run_id = f"{time.time_ns() % 10**9:09d}"
    cold = warm = None

    def cli_of(ns: str) -> Cli:
        env = worker_env(url, ns, tmp, db, a.concurrency, a.named, a.mark_buckets, a.stathat_url)
        if a.callgrind:  # one order of every set and dict of bytes and strings from one count to the next
            env["PYTHONHASHSEED"] = "0"
        return Cli(a.code, env)

    def count_file(name: str) -> Path | None:
        return a.callgrind / f"{name}.callgrind" if a.callgrind else None

    for i in range(2):  # no torrents: the first warms the caches, the second is the start-up figure
        ns = f"vcstart{run_id}{i}"
        raw = Run(cli_of(ns), client, ns, ot.proc.pid, tmp / f"{ns}.log", a.concurrency, [], a.timeout,
                  callgrind_out=count_file(f"startup{i}")).go()
        cold, warm = (raw, warm) if i == 0 else (cold, raw)
    assert cold is not None and warm is not None
    out["startup"] = figures(warm, a.concurrency, None)
    out["startup"]["startup_cold_cpu_s"] = round(cold["worker_cpu"], 3)
    startup_cpu, startup_instructions = warm["worker_cpu"], warm.get("instructions")

    ns = f"vc{run_id}"
    cli = cli_of(ns)
    src = tmp / "magnets.txt"
    src.write_text(magnets(hashes, ot.udp_url, a.named))
    added = json.loads(cli.run("add", "--json", "--from", str(src)))
    spy = a.profile / "first.txt" if a.profile else None
    raw = Run(cli, client, ns, ot.proc.pid, tmp / f"{ns}-first.log", a.concurrency, hashes, a.timeout, spy,
              count_file("first")).go()
    out["first"] = figures(raw, a.concurrency, startup_cpu, startup_instructions)
    out["first"]["added"] = added["added"]
    first_counts, out["first"]["counts"] = check_counts(cli, hashes)

    made = json.loads(cli.run("add", "--json", "--due-now", "--from", str(src)))
    spy = a.profile / "revisit.txt" if a.profile else None
    raw = Run(cli, client, ns, ot.proc.pid, tmp / f"{ns}-revisit.log", a.concurrency, hashes, a.timeout, spy,
              count_file("revisit")).go()
    out["revisit"] = figures(raw, a.concurrency, startup_cpu, startup_instructions)
    out["revisit"]["made_due"] = made["made_due"]
    _, out["revisit"]["counts"] = check_counts(cli, hashes, first_counts)

    for i, h in enumerate(hashes):  # one peer more in every swarm
        k = addresses + i
        ot.announce_many(address(k), [h], swarms.PORTS + k % 20000, left=1)
    made = json.loads(cli.run("add", "--json", "--due-now", "--from", str(src)))
    spy = a.profile / "churned.txt" if a.profile else None
    raw = Run(cli, client, ns, ot.proc.pid, tmp / f"{ns}-churned.log", a.concurrency, hashes, a.timeout, spy,
              count_file("churned")).go()
    out["churned"] = figures(raw, a.concurrency, startup_cpu, startup_instructions)
    out["churned"]["made_due"] = made["made_due"]
    _, out["churned"]["counts"] = check_counts(cli, hashes, {h: n + 1 for h, n in first_counts.items()}, SWARM + 1)
    out["counts_exact"] = all(out[p]["counts"]["counts_exact"] for p in ("first", "revisit", "churned"))
    return out


def main() -> None:
    """Build the world, run the worker on it, print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300 torrents (about 15 s; full: under a minute)")
    ap.add_argument("--torrents", type=int, default=3000)
    ap.add_argument("--concurrency", type=pool_size, default=64, help="runners (default 64), or auto")
    ap.add_argument("--overlap", type=int, default=4, help="swarms each peer address is in (default 4)")
    ap.add_argument("--mark-buckets", type=int, help="the crawl's PEERCRAWL_MARK_BUCKETS (default: the worker's): "
                    "fewer fill them as a larger crawl does; a commit before the setting ignores it")
    ap.add_argument("--named", action="store_true", help="metadata fetches on and every torrent named (module note)")
    ap.add_argument("--stathat", action="store_true", help="StatHat on, posting to a loopback stand-in (module note)")
    ap.add_argument("--code", type=Path, default=Path.cwd(), help="the tree whose peercrawl runs (default: cwd)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one worker run may take before SIGTERM")
    ap.add_argument("--profile", type=Path, help="sample the worker with py-spy (collapsed stacks into this "
                    "directory) and read Redis's SLOWLOG: each pass gains a profile (slower while sampled)")
    ap.add_argument("--callgrind", type=Path, help="run each worker under callgrind (its output files into this "
                    "directory): each run gains its instructions (module note); ~40x slower, so give a --timeout")
    a = ap.parse_args()
    a.code = a.code.resolve()
    if a.profile:
        a.profile.mkdir(parents=True, exist_ok=True)
    if a.callgrind:
        if a.profile:
            ap.error("--callgrind and --profile each run the worker their own way: one at a time")
        a.callgrind = a.callgrind.resolve()
        a.callgrind.mkdir(parents=True, exist_ok=True)
    n = 300 if a.quick else a.torrents
    if n < 1 or a.overlap < 1:
        ap.error("--torrents and --overlap must be at least 1")
    needed = swarms.addresses_for(n, a.overlap, SWARM) + n  # then one more a swarm (churned)
    if needed > ADDRESSES:
        most = ADDRESSES * a.overlap // (SWARM + a.overlap)
        ap.error(f"--torrents {n} with --overlap {a.overlap} needs {needed:,} peer addresses; "
                 f"the loopback world has {ADDRESSES:,} (at most about {most:,} torrents)")
    t_start = time.monotonic()
    code = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=a.code, capture_output=True,
                          text=True)
    out: dict = {"code": code.stdout.strip() or str(a.code)}
    hashes = swarms.hashes_for("visit-cost", n)
    with tempfile.TemporaryDirectory(prefix="bench-visit-cost-") as tmpdir:
        tmp = Path(tmpdir)
        db = write_city_db(tmp / "city.mmdb", PLACES)
        ot = OpenTracker(tmp / "ot", hashes).start()
        sink = StatHatSinkProcess() if a.stathat else None
        a.stathat_url = sink.url if sink is not None else None
        try:
            t = time.monotonic()
            addresses = swarms.populate(ot, hashes, a.overlap, address, SWARM)
            out["world"] = {"mode": "quick" if a.quick else "full", "torrents": n, "peers_per_swarm": SWARM,
                            "peer_addresses": addresses, "swarms_per_address": a.overlap,
                            "subnets": f"127.10.0.0/16 to 127.{10 + SUBNETS - 1}.0.0/16",
                            "trackers": 1, "concurrency": a.concurrency, "revisit_s": REVISIT_SECONDS, "named": a.named,
                            "mark_buckets": a.mark_buckets,
                            "populate_s": round(time.monotonic() - t, 1), "cpus": os.cpu_count()}
            with Topology(None) as tp:
                client = redis.Redis.from_url(tp.url)
                out["world"]["redis"] = client.info("server")["redis_version"]
                if a.profile:  # every command into the SLOWLOG, to split Redis's time by script
                    client.config_set("slowlog-max-len", SLOWLOG_LEN)
                    client.config_set("slowlog-log-slower-than", 0)
                out.update(passes(a, tmp, client, tp.url, ot, db, hashes, addresses))
                client.close()
            if sink is not None:
                out["world"]["stathat_increments"] = sink.close()
                sink = None
        finally:
            ot.stop()
            if sink is not None:
                sink.close()
    out["bench_seconds"] = round(time.monotonic() - t_start, 1)
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
