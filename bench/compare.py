"""What a change cost: one benchmark run on two commits, interleaved, in one session.

Usage: python bench/compare.py BASE [HEAD] --bench bench_worker.py [--runs 3] [--bench-from-head] [-- ARGS...]

Checks BASE and HEAD (default: the work tree's HEAD) out into temporary git
worktrees and runs ``python bench/<bench> ARGS`` in each, alternating
(base, head, base, head, ...) so that both see the same moments of a shared
machine. Each run's JSON is flattened to its numeric leaves; the output is
JSON with, per leaf, the median of each side, head/base, and the base
side's spread ((largest - smallest) / median): the run-to-run noise a
head/base ratio has to be read against. The benchmarks
import the project from their working directory, so each side runs its own
code with this interpreter's installed dependencies.

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
            runs: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
            for i in range(a.runs):
                for side in ("base", "head"):
                    print(f"compare: run {i + 1}/{a.runs} of {side}", file=sys.stderr)
                    script = trees["head"] / "bench" / a.bench if a.bench_from_head else None
                    runs[side].append(run_once(trees[side], a.bench, extra, script))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    names = sorted(set().union(*runs["base"]) & set().union(*runs["head"]))
    result = {}
    for name in names:
        b = statistics.median(r[name] for r in runs["base"] if name in r)
        h = statistics.median(r[name] for r in runs["head"] if name in r)
        result[name] = {"base": b, "head": h, "head_over_base": round(h / b, 3) if b else None,
                        "base_spread": _spread([r[name] for r in runs["base"] if name in r])}
    print(json.dumps({"bench": a.bench, "base": commits["base"], "head": commits["head"], "runs": a.runs, "figures": result},
                     indent=2))


if __name__ == "__main__":
    main()
