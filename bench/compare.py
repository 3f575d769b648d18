"""What a change cost: one benchmark run on two commits, interleaved, in one session.

Usage: python bench/compare.py BASE [HEAD] --bench bench_worker.py [--runs 3] [--bench-from-head] [-- ARGS...]

Checks BASE and HEAD (default: the work tree's HEAD) out into temporary git
worktrees and runs ``python bench/<bench> ARGS`` in each, alternating, each
round in the other order (base, head; head, base; base, head; ...) so that both
see the same moments of a shared machine and neither is always the second of
its round (with the base first in every round, the head's side was seen ~5 %
slower in every figure, those its change could not touch included). Each
run's JSON is flattened to its numeric leaves; the output is JSON with, per
leaf, the median of each side, head/base, each side's spread ((largest -
smallest) / median: the run-to-run noise a head/base ratio has to be read
against), each side's runs in order, and ``paired``: the median over rounds of
each round's head/base, its two runs next to each other in time, which a
machine whose speed drifts between rounds moves less. A leaf only one side
prints (a figure the base's code has not) is given with that side's median. The benchmarks
import the project from their working directory, so each side runs its own
code with this interpreter's installed dependencies.

Each tree is built as a wheel installs it: where it has a ``setup.py``, its compiled modules are
built beside its sources first (``setup.py build_ext --inplace``); ``--sources`` runs the
sources alone on both sides.

``--bench-from-head`` runs HEAD's ``bench/<bench>`` on both sides, each
still in its own tree as the working directory: for a benchmark BASE does
not have yet. Only for one that takes the code it measures from its working
directory (``bench_world.py`` runs ``python -m crawler`` there); a benchmark
that imports the project from beside its own file would measure HEAD twice.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def leaves(value, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a JSON value, keyed by their dotted path; a yes/no (``counted_exactly``) as 1 or 0."""
    out: dict[str, float] = {}
    if isinstance(value, (bool, int, float)):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.update(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(leaves(v, f"{prefix}[{i}]"))
    return out


def run_once(tree: Path, bench: str, args: list[str], script: Path | None = None) -> dict[str, float]:
    """One run of ``bench`` in ``tree`` (``script``: that file instead of the tree's own): its JSON's
    numeric figures, flattened."""
    p = subprocess.run([sys.executable, str(script) if script else f"bench/{bench}", *args], cwd=tree,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"compare: {bench} failed in {tree}: {p.stderr.strip().splitlines()[-1:]}")
    return leaves(json.loads(p.stdout))


def _spread(values: list[float]) -> float | None:
    """The run-to-run noise of one side: (largest - smallest) / median, None when the median is 0."""
    m = statistics.median(values)
    return round((max(values) - min(values)) / abs(m), 3) if m else None


def figure(name: str, runs: dict[str, list[dict[str, float]]]) -> dict:
    """One leaf's medians, ratio, spreads and per-round ratio (module note), and each side's runs in
    order (an outlier or a drift shows there); a side without it is None."""
    got = {side: [r.get(name) for r in runs[side]] for side in ("base", "head")}
    have = {side: [v for v in got[side] if v is not None] for side in got}
    b, h = (statistics.median(have[side]) if have[side] else None for side in ("base", "head"))
    rounds = [y / x for x, y in zip(got["base"], got["head"]) if x and y is not None]
    return {"base": b, "head": h, "head_over_base": round(h / b, 3) if b and h is not None else None,
            "base_spread": _spread(have["base"]) if have["base"] else None,
            "head_spread": _spread(have["head"]) if have["head"] else None,
            "paired": round(statistics.median(rounds), 3) if rounds else None,
            "base_runs": got["base"], "head_runs": got["head"]}


def main() -> None:
    """Parse the command line, run base and head interleaved, print medians and head/base."""
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("head", nargs="?", default="HEAD")
    ap.add_argument("--bench", required=True, help="a file of bench/, e.g. bench_worker.py")
    ap.add_argument("--runs", type=int, default=3, help="runs per side (default 3)")
    ap.add_argument("--bench-from-head", action="store_true",
                    help="run HEAD's bench file on both sides, each side's tree its working directory (module note)")
    ap.add_argument("--sources", action="store_true", help="build no compiled modules (module note)")
    a = ap.parse_args(argv)
    commits = {side: subprocess.run(["git", "rev-parse", "--short", getattr(a, side)], cwd=ROOT, check=True,
                                    capture_output=True, text=True).stdout.strip() for side in ("base", "head")}
    with tempfile.TemporaryDirectory(prefix="peercrawl-compare-") as tmp:
        trees = {}
        for side in ("base", "head"):
            rev = commits[side]
            tree = Path(tmp) / side
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=ROOT, check=True)
            trees[side] = tree
        try:
            for side, tree in trees.items():
                if not a.sources and (tree / "setup.py").is_file():
                    print(f"compare: compiling {side}'s modules (setup.py)", file=sys.stderr)
                    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True,
                                   capture_output=True)
            runs: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
            for i in range(a.runs):
                for side in ("base", "head") if i % 2 == 0 else ("head", "base"):
                    print(f"compare: run {i + 1}/{a.runs} of {side}", file=sys.stderr)
                    script = trees["head"] / "bench" / a.bench if a.bench_from_head else None
                    runs[side].append(run_once(trees[side], a.bench, extra, script))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    result = {name: figure(name, runs) for name in sorted(set().union(*runs["base"], *runs["head"]))}
    print(json.dumps({"bench": a.bench, "base": commits["base"], "head": commits["head"], "runs": a.runs, "figures": result},
                     indent=2))


if __name__ == "__main__":
    main()
