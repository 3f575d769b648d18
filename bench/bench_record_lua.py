"""Where record.lua and probe.lua spend a first visit's and a revisit's Redis CPU.

Usage: python bench/bench_record_lua.py [--redis-url URL] [--visits 1000] [--batch 32] [--reps 5]
                                        [--mark-buckets N] [--overlap 4] [--shards 1] [--no-replay] [--lines N]
                                        [--shuffle] [--first-only] [--no-stathat]

Records ``--visits`` first visits of 50 peers (bench_worker's swarms: four
countries, each address in ``--overlap`` swarms) in batches of ``--batch`` with
``Recorder.record_visits`` into a fresh namespace, unprobed as a worker
records a torrent never visited, then the same visits again, probed
(revisits: every IP known), and reports per visit the Redis time of
every script call (INFO commandstats, ``evalsha``; the Redis is reset
before each phase, so use a private one). Redis's figure on a shared
two-core machine moves by ±15 % from run to run, too much to tell a change
of a few per cent; so the script calls are also captured and replayed in a
stock Lua 5.1 (Debian's ``lua5.1``, with ``lua-bitop``: Redis's ``bit``) against a table-backed
``redis.call``: the same Lua, no other process, CPU time by ``os.clock``,
the best of ``--reps`` replays. The replay splits a record.lua call into
reading the mark buckets, the loop over the IPs, writing the buckets and
the index writes (timers spliced into the script around those lines), and
times the revisits' probe.lua calls alone. The fake commands cost Lua time
too: read the replay's figures as ratios between two commits
(``bench/compare.py``), not as Redis's. ``--lines N``: one more replay of
the first visits' record.lua calls under a count hook (``debug.sethook``,
every 50 Lua instructions) that charges the CPU time since the hook before
to the line running, giving the N lines of record.lua (its includes
spliced in) that took the largest shares of that replay's time: a line
profile, where the phases above say only which part. A C function a line
calls (``string.find``, ``redis.call``) is charged to that line. ``--mark-buckets`` gives the
recorder fewer buckets than a new crawl's, to fill them as a larger crawl
does (a visit's scripts copy each bucket they change whole). ``--shuffle``
records the visits in a random order (a fixed seed), as a crawl claims
them: in index order the addresses of one swarm are met one after the
other, so what the process keeps of them lies side by side in memory,
and a memory's cache misses, most of a large lookup's cost, stay out of
the Python figure. The collector runs as in a worker process
(``workers.process.tune_gc``). ``--first-only`` records the first visits
alone and ``--no-stathat`` posts to no outbox (as ``bench_visit_cost``'s
world): what a run of redis-server under callgrind needs to count a first
visit's instructions, the difference of two runs of different ``--visits``.

Prints JSON.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # as bench_worker, imported below, does: before anything imports ssl

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_worker  # its swarms: addresses, places, swarm size
import swarms

from crawler.counters.recorder import Recorder
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.store.scripts import source
from crawler.store.store import Store
from geo import Locator
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from workers.process import tune_gc

SWARM = bench_worker.SWARM

# Splices timers around record.lua's parts (the replay only): (line it follows or precedes, timer).
TIMERS = [
    ("local vals = read_buckets(nfixed + 1)", "local _c0 = os.clock()\n{}\nTT[1] = TT[1] + os.clock() - _c0; _c0 = os.clock()"),
    ("write_buckets(nfixed + 1, vals, dirty, adds)\n",
     "TT[2] = TT[2] + os.clock() - _c0; _c0 = os.clock()\n{}TT[3] = TT[3] + os.clock() - _c0; _c0 = os.clock()\n"),
    ("return users\n", "TT[4] = TT[4] + os.clock() - _c0\n{}"),
]
# Before record.lua took several visits a call (for a comparison with bench/compare.py).
OLD_END = ("return t_users\n", "TT[4] = TT[4] + os.clock() - _c0\n{}")

HARNESS = r"""
bit = require('bit')  -- Redis's Lua has LuaBitOp built in; stock Lua 5.1 loads it (Debian's lua-bitop)
dofile(arg[1])
local function load(path, name)
  return assert(loadstring("return function() " .. io.open(path):read("*a") .. "\nend", "=" .. name))()
end
local record, probe = load(arg[2], "record"), load(arg[3], "probe")
local reps, nlines = tonumber(arg[4]), tonumber(arg[5])
local db
redis = {}
function redis.error_reply(m) return {err = m} end
function redis.call(cmd, ...)
  local a = {...}
  if cmd == 'MGET' then
    local out = {}
    for i = 1, #a do out[i] = db[a[i]] or false end
    return out
  elseif cmd == 'HMGET' or cmd == 'ZMSCORE' then
    local t, out = db[a[1]] or {}, {}
    for i = 2, #a do out[i - 1] = t[a[i]] or false end
    return out
  elseif cmd == 'ZSCORE' then
    local t = db[a[1]]
    return t and t[a[2]] or false
  elseif cmd == 'GET' then
    return db[a[1]] or false
  elseif cmd == 'MSET' then
    for i = 1, #a, 2 do db[a[i]] = a[i + 1] end
  elseif cmd == 'ZADD' then
    local t = db[a[1]] or {}; db[a[1]] = t
    for i = 2, #a, 2 do t[a[i + 1]] = a[i] end
  elseif cmd == 'HSET' then
    local t = db[a[1]] or {}; db[a[1]] = t
    for i = 2, #a, 2 do t[a[i]] = a[i + 1] end
  elseif cmd == 'ZINCRBY' then
    local t = db[a[1]] or {}; db[a[1]] = t
    t[a[3]] = (tonumber(t[a[3]]) or 0) + a[2]
  elseif cmd == 'HINCRBY' then
    local t = db[a[1]] or {}; db[a[1]] = t
    t[a[2]] = (tonumber(t[a[2]]) or 0) + a[3]
  else error("replay: no fake " .. cmd) end
end
-- one replayed call: its script's time (its keys set before and its error checked after, untimed)
local function call(c)
  KEYS, ARGV = c[3], c[4]
  local t0 = os.clock()
  local r = (c[1] == 'R' and record or probe)()
  local dt = os.clock() - t0
  if type(r) == 'table' and r.err then error(r.err) end
  return dt
end
local best = {record = 1e9, probe = 1e9, parts = nil}
local nr, np = 0, 0
for rep = 1, reps do
  db, TT = {}, {0, 0, 0, 0}
  collectgarbage("collect")
  local tr, tp = 0, 0
  nr, np = 0, 0
  local settled = false
  for i = 1, #CALLS do
    local c = CALLS[i]
    if c[2] == 're' and not settled then
      -- the revisits' probes are timed alone: not paying for the first visits' garbage
      collectgarbage("collect")
      settled = true
    end
    local dt = call(c)
    if c[1] == 'R' then tr, nr = tr + dt, nr + 1
    elseif c[2] == 're' then tp, np = tp + dt, np + 1 end
  end
  if tr < best.record then best.record, best.parts = tr, {TT[1], TT[2], TT[3], TT[4]} end
  if tp < best.probe then best.probe = tp end
end
-- the line profile (--lines): seconds charged to each line of record.lua
local spent, total, last = {}, 0, 0
local function hook()
  local now, info = os.clock(), debug.getinfo(2, "Sl")
  if info and info.short_src == "record" then
    spent[info.currentline] = (spent[info.currentline] or 0) + now - last
    total = total + now - last
  end
  last = os.clock()
end
local lines = {}
if nlines > 0 then
  db, TT = {}, {0, 0, 0, 0}
  collectgarbage("collect")
  for i = 1, #CALLS do
    local c = CALLS[i]
    if c[1] == 'R' and c[2] == 'first' then
      last = os.clock()
      debug.sethook(hook, "", 50)
    end
    call(c)
    debug.sethook()
  end
  local order = {}
  for line in pairs(spent) do order[#order + 1] = line end
  table.sort(order, function(x, y) return spent[x] > spent[y] end)
  for i = 1, math.min(nlines, #order) do
    lines[i] = string.format("[%d, %.4f]", order[i], spent[order[i]] / total)
  end
end
local function ms(x, n) return string.format("%.4f", x / math.max(n, 1) * 1000) end
print(string.format('{"record_calls": %d, "record_ms_per_call": %s, "read_buckets_ms": %s, "ip_loop_ms": %s, ' ..
  '"write_buckets_ms": %s, "index_writes_ms": %s, "revisit_probe_calls": %d, "probe_ms_per_call": %s, ' ..
  '"lines": [%s]}',
  nr, ms(best.record, nr), ms(best.parts[1], nr), ms(best.parts[2], nr), ms(best.parts[3], nr),
  ms(best.parts[4], nr), np, ms(best.probe, np), table.concat(lines, ", ")))
"""


def lua_bytes(b: bytes) -> str:
    """``b`` as a Lua string literal."""
    return '"' + "".join(f"\\{c}" for c in b) + '"'


def world(n: int, overlap: int, shuffle: bool) -> list[tuple[str, list[str]]]:
    """``n`` visits of bench_worker's swarms, each address in ``overlap`` of them, in index order or
    (``shuffle``) a random one (module note)."""
    n_addr = swarms.addresses_for(n, overlap, SWARM)
    visits = [(f"{i:040x}", [bench_worker.address((i * SWARM + j) % n_addr) for j in range(SWARM)]) for i in range(n)]
    if shuffle:
        random.Random(1).shuffle(visits)
    return visits


def record_phases(client: redis.Redis, rec: Recorder, visits: list, batch: int, phase: list, first_only: bool) -> dict:
    """``visits`` recorded by ``rec`` in batches of ``batch``, first visits then (unless ``first_only``)
    revisits, ``phase[0]`` naming the one under way: per phase, Redis's script time and the Python
    side's CPU a visit."""
    out, now = {}, time.time()
    for phase[0] in ("first",) if first_only else ("first", "re"):
        client.config_resetstat()
        t = time.process_time()
        for i in range(0, len(visits), batch):
            # as a worker records them: a first visit (a torrent never visited) without its probe
            some = visits[i:i + batch]
            rec.record_visits(some, now, [phase[0] == "re"] * len(some))
        py = time.process_time() - t
        us = sum(v["usec"] for k, v in client.info("commandstats").items() if k.startswith("cmdstat_evalsha"))
        out[phase[0]] = {"script_ms_per_visit": round(us / len(visits) / 1000, 4),
                         "python_ms_per_visit": round(py / len(visits) * 1000, 4)}
    return out


def main() -> None:
    """Record, capture, replay; print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--redis-url", default=os.environ.get("PEERCRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    ap.add_argument("--visits", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mark-buckets", type=int, help="the recorder's mark buckets (default: a new crawl's); fewer "
                    "fill them as a larger crawl does")
    ap.add_argument("--overlap", type=int, default=4, help="swarms each peer address is in (1: every peer of a first "
                    "visit is new to the recorder, as most are in a crawl)")
    ap.add_argument("--shards", type=int, default=1, help="counter shards: more than one records each IP's "
                    "place part in its own shard first (places.lua), the torrent parts after")
    ap.add_argument("--no-replay", action="store_true", help="Redis's figures only")
    ap.add_argument("--lines", type=int, default=0, help="a line profile of the first visits' record.lua calls: "
                    "the N lines of the largest shares (module note)")
    ap.add_argument("--shuffle", action="store_true", help="record the visits in a random order, as a crawl claims "
                    "them (module note)")
    ap.add_argument("--first-only", action="store_true", help="record the first visits alone, not the revisits")
    ap.add_argument("--no-stathat", action="store_true", help="StatHat off: no outbox increments in the calls")
    ap.add_argument("--keep", action="store_true", help="leave the bench's keys (a private server, discarded after): "
                    "deleting them scans every key the visits made, work a count per visit should not hold")
    a = ap.parse_args()
    lua = shutil.which("lua5.1")
    client = redis.Redis.from_url(a.redis_url)
    tmp = Path(tempfile.mkdtemp(prefix="bench-record-lua-"))
    ns = "bench-record-" + uuid.uuid4().hex[:8]
    settings = Settings(redis_url=a.redis_url, namespace=ns, data_dir=tmp / "d", dht=False, allow_private=True,
                        secret="bench-secret-0123456789", geoip_db=write_city_db(tmp / "city.mmdb", bench_worker.PLACES),
                        stathat_ezkey=None if a.no_stathat else "bench", stathat_url="http://127.0.0.1:9/")
    phase = ["first"]
    calls: list = []

    class Capturing(Store):
        """The recorder's store, keeping every probe.lua and record.lua call it runs."""

        def run(self, batch, wait=None, *, own=False):
            for script, keys, args in batch:
                kind = "R" if script is rec._record else "P" if script is rec._probe_script else None
                if kind:
                    calls.append((kind, phase[0], [k if isinstance(k, bytes) else str(k).encode() for k in keys],
                                  [x if isinstance(x, bytes) else str(x).encode() for x in args]))
            return super().run(batch, wait, own=own)

    rec = Recorder(Capturing(client), Keys(ns, a.shards, rosters=True), settings, Locator(settings), mark_buckets=a.mark_buckets)
    tune_gc()  # the collector as a worker process runs it
    visits = world(a.visits, a.overlap, a.shuffle)
    out: dict = {"visits": a.visits, "peers_per_visit": SWARM, "batch": a.batch, "overlap": a.overlap, "shards": a.shards,
                 "shuffled": a.shuffle, "mark_buckets": rec.fingerprints.buckets}
    try:
        out["redis"] = record_phases(client, rec, visits, a.batch, phase, a.first_only)
    finally:
        if not a.keep:
            delete_namespace(client, ns)
    if a.no_replay:
        out["replay"] = "not run (--no-replay)"
    elif lua is None or subprocess.run([lua, "-e", "require('bit')"], capture_output=True).returncode:
        out["replay"] = "lua5.1 or its bit library not installed (apt-get install lua5.1 lua-bitop)"
    else:
        record = source("record", "crawler.counters")
        for line, timer in TIMERS:
            if line not in record and line == TIMERS[-1][0]:
                line, timer = OLD_END
            assert line in record, line
            record = record.replace(line, timer.format(line), 1)
        (tmp / "record.lua").write_text(record)
        (tmp / "probe.lua").write_text(source("probe", "crawler.counters"))
        (tmp / "harness.lua").write_text(HARNESS)
        with open(tmp / "calls.lua", "w") as f:
            f.write("CALLS = {\n")
            for kind, ph, keys, args in calls:
                f.write(f"{{'{kind}','{ph}',{{" + ",".join(map(lua_bytes, keys)) + "},{"
                        + ",".join(map(lua_bytes, args)) + "}},\n")
            f.write("}\n")
        got = subprocess.run([lua, str(tmp / "harness.lua"), str(tmp / "calls.lua"), str(tmp / "record.lua"),
                              str(tmp / "probe.lua"), str(a.reps), str(a.lines)], capture_output=True, text=True)
        out["replay"] = json.loads(got.stdout) if got.returncode == 0 else {"failed": got.stderr.strip()[-500:]}
        if "lines" in out["replay"]:
            # each line as its share of the profiled replay's record.lua time and its text
            text = record.split("\n")
            out["replay"]["lines"] = [{"line": n, "share": share, "source": text[n - 1].strip()}
                                      for n, share in out["replay"]["lines"]]
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
