"""Instructions a recorded first visit costs, counted by callgrind: a figure the machine's speed does not move.

Usage: python bench/bench_instructions.py [--side redis|python|both] [--redis-visits 500] [--python-visits 200]

The wall-clock benchmarks of a visit (``bench_visit_cost.py``) read one
pair of commits 0.05-0.3 apart from one comparison to the next on a shared
machine: a change of a few per cent shows only in a count that does not
depend on it. This one runs the working directory's
``bench/bench_record_lua.py`` (so the code measured is that tree's, also
under ``bench/compare.py --bench-from-head``) recording first visits of
``bench_visit_cost``'s world (``--first-only --no-stathat --shuffle --keep``,
``PYTHONHASHSEED=0``; ``--keep``: the server is discarded, so the keys
are left rather than scanned and deleted: 8 % of the Redis count and 7 % of the Python one)
against a private redis-server on a free loopback
port, twice, N and 2N visits, under ``valgrind --tool=callgrind``:

- ``redis``: the server runs under callgrind; the difference of its two
  totals is N first visits' worth of Redis work (the server's start and the
  bench's set-up cancel out): record.lua, its commands, the protocol.
- ``python``: the bench's own process runs under callgrind (the server not):
  the recorder's Python side, meeting and packing the IPs and sending the calls.

Each count repeats to ~0.1 % (redis) and ~1 % (python: the interpreter's
dictionaries and collector grow differently over N and 2N visits). Before
the Python runs, one run without callgrind writes the code's compiled files,
which a first run would otherwise charge to itself (~2 %).

Needs Debian's ``valgrind`` and ``redis-server``. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks' Redis (the code measured runs from the working directory)
sys.path.insert(0, str(ROOT / "bench"))

from cluster_nodes import Topology


def instructions(out: Path) -> int:
    """The total of a callgrind output file (its ``summary:`` line)."""
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"bench_instructions: no total in {out}")


def callgrind(out: Path) -> tuple[str, ...]:
    """The command a process runs under to count its instructions into ``out``."""
    return ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")


def record(url: str, visits: int, counted: Path | None) -> None:
    """The working directory's ``bench_record_lua.py`` recording ``visits`` first visits against ``url``,
    its process under callgrind (output ``counted``) unless None."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONHASHSEED"] = "0"
    argv = [sys.executable, "bench/bench_record_lua.py", "--redis-url", url, "--visits", str(visits), "--reps", "1",
            "--no-replay", "--shuffle", "--first-only", "--no-stathat", "--keep"]
    if counted is not None:
        argv = [*callgrind(counted), *argv]
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"bench_instructions: bench_record_lua.py failed ({p.returncode}): {tail}")


def side(name: str, n: int, tmp: Path, say) -> dict:
    """One side's count: N and 2N first visits, each in a new private server, the figure their difference."""
    totals = []
    for visits in (n, 2 * n):
        say(f"{name}: {visits} first visits under callgrind")
        out = tmp / f"{name}-{visits}.callgrind"
        with Topology(None, wrap=callgrind(out) if name == "redis" else ()) as server:
            record(server.url, visits, out if name == "python" else None)
            server.shutdown()
        totals.append(instructions(out))
    return {"visits": [n, 2 * n], "totals": totals, "instructions_per_first_visit": round((totals[1] - totals[0]) / n)}


def main() -> None:
    """Count each side asked for; print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", choices=("redis", "python", "both"), default="both")
    ap.add_argument("--redis-visits", type=int, default=500, help="N of the redis side (N and 2N recorded)")
    ap.add_argument("--python-visits", type=int, default=200, help="N of the python side (N and 2N recorded)")
    a = ap.parse_args()
    for tool in ("valgrind", "redis-server"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_instructions: {tool} not found (Debian: apt-get install valgrind redis-server)")
    if not Path("bench/bench_record_lua.py").exists():
        raise SystemExit("bench_instructions: run from a checkout's root (bench/bench_record_lua.py not found)")

    def say(text: str) -> None:
        if sys.stderr.isatty():
            print(text, file=sys.stderr, flush=True)

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as d:
        tmp = Path(d)
        if a.side in ("python", "both"):
            with Topology(None) as warm:
                record(warm.url, 10, None)  # writes the compiled files the counted runs then load
        if a.side in ("redis", "both"):
            out["redis"] = side("redis", a.redis_visits, tmp, say)
        if a.side in ("python", "both"):
            out["python"] = side("python", a.python_visits, tmp, say)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
