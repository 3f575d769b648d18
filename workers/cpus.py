"""The cores this process may run on: what ``worker --processes auto`` starts a process per.

``os.cpu_count()`` counts the machine's cores, not the dyno's: a container
given two cores of a 64-core host, or a process pinned to a few of them,
would start 64 workers that time-share two cores. Two things bound what a
process may use:

- its CPU affinity (``os.sched_getaffinity``: ``taskset``, cpusets);
- its cgroup's CPU quota, cgroup v2 (``cpu.max``: ``"<quota> <period>"``
  or ``"max <period>"``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
  -1 for none), in its own cgroup or any above it (the tightest wins).
  Heroku-like platforms and Kubernetes' CPU limits set it.

``usable_cpus`` is the smaller of the two, a quota rounded up (1.5 cores:
two processes, each getting most of a core, rather than one leaving half a
core idle), and at least 1. Files that cannot be read are taken as no
quota: the affinity still bounds it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cpus(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> int:
    """The cores this process may run on: its affinity, bounded by its cgroups' CPU quota (module note)."""
    n = len(os.sched_getaffinity(0))
    quota = cgroup_quota(proc_cgroup, root)
    if quota is not None:
        n = min(n, math.ceil(quota))
    return max(1, n)


def cgroup_quota(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota, in cores, of this process's cgroups and the ones above them; None: none."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if controllers == "":  # cgroup v2: one hierarchy at the root
            found += _each_level(root, path, _v2)
        elif "cpu" in names:  # cgroup v1: the cpu controller's own mount
            base = next((root / c for c in (controllers, "cpu,cpuacct", "cpu") if (root / c).is_dir()), None)
            if base is not None:
                found += _each_level(base, path, _v1)
    return min(found) if found else None


def _each_level(base: Path, path: str, read) -> list[float]:
    """``read(dir)`` of the cgroup at ``path`` under ``base`` and of every one above it, where set."""
    parts = [p for p in path.split("/") if p]
    out = []
    for depth in range(len(parts), -1, -1):
        q = read(base.joinpath(*parts[:depth]))
        if q is not None:
            out.append(q)
    return out


def _v2(d: Path) -> float | None:
    try:
        quota, period = (d / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1(d: Path) -> float | None:
    try:
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period
