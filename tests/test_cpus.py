"""``worker --processes auto``'s core count (workers/cpus.py) from a real CPU affinity and a real cgroup quota.

The quota test makes a cgroup of its own (the v1 ``cpu`` controller's mount,
or the v2 hierarchy), gives it half a core, and runs a child process inside
it: on this two-core machine the child may use two cores by affinity and
one by quota.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from workers.cpus import cgroup_quota, usable_cpus

ROOT = str(Path(__file__).resolve().parent.parent)
CPU_V1, V2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
PROBE = "from workers.cpus import usable_cpus, cgroup_quota; print(usable_cpus(), cgroup_quota())"


def _child(preexec=None) -> tuple[int, float | None]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=ROOT,
                         preexec_fn=preexec).stdout.split()
    return int(out[0]), None if out[1] == "None" else float(out[1])


def test_auto_counts_the_cores_of_the_affinity_mask():
    cores = sorted(os.sched_getaffinity(0))
    assert usable_cpus() <= len(cores)
    n, _ = _child(lambda: os.sched_setaffinity(0, {cores[0]}))
    assert n == 1
    if len(cores) >= 2:
        assert _child(lambda: os.sched_setaffinity(0, set(cores[:2])))[0] == 2


@pytest.fixture
def cgroup():
    """A fresh cgroup with a CPU quota to set, and its directory's ``cgroup.procs``: (dir, set_quota)."""
    name = "peercrawl-test-" + uuid.uuid4().hex[:8]
    if (CPU_V1 / "cpu.cfs_quota_us").exists():
        d = CPU_V1 / name
        d.mkdir()

        def set_quota(cores: float) -> None:
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text(str(int(cores * 100000)))
    else:
        d = V2 / name
        d.mkdir()

        def set_quota(cores: float) -> None:
            (d / "cpu.max").write_text(f"{int(cores * 100000)} 100000")
    try:
        yield d, set_quota
    finally:
        d.rmdir()  # empty again once its child has exited


def test_auto_is_bounded_by_the_cgroups_cpu_quota(cgroup):
    d, set_quota = cgroup
    set_quota(0.5)
    procs = d / "cgroup.procs"

    def join() -> None:
        procs.write_text(str(os.getpid()))

    n, quota = _child(join)
    assert quota == 0.5 and n == 1  # two cores by affinity, half a core by quota: one process
    set_quota(1.5)
    n, quota = _child(join)
    assert quota == 1.5 and n == min(2, len(os.sched_getaffinity(0)))  # rounded up, bounded by affinity
    # outside the cgroup the quota does not apply
    assert cgroup_quota() is None or cgroup_quota() != 1.5


def test_a_quota_above_the_process_cgroup_bounds_it_too(tmp_path):
    # v1 layout read from files a test writes: the parent cgroup holds the quota, the child none
    (tmp_path / "cpu" / "a" / "b").mkdir(parents=True)
    (tmp_path / "cpu" / "a" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "a" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "a" / "b" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "a" / "b" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("3:cpuset:/\n1:cpu:/a/b\n")
    assert cgroup_quota(proc, tmp_path) == 0.5 and usable_cpus(proc, tmp_path) == 1
    # v2: "max" is no quota; a garbled file is none either
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "x" / "y" / "cpu.max").write_text("garbage\n")
    proc.write_text("0::/x/y\n")
    assert cgroup_quota(proc, tmp_path) is None
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # the root's own
    assert cgroup_quota(proc, tmp_path) == 2.5
