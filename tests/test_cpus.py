"""``worker --processes auto``'s core count (workers/cpus.py) from a real CPU affinity and a real cgroup quota.

The quota test makes a cgroup of its own (the v1 ``cpu`` controller's mount,
or the v2 hierarchy), gives it half a core, and runs a child process inside
it: on this two-core machine the child may use two cores by affinity and
one by quota.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from workers.cpus import (
    COUNT_MAX,
    FILE_CAP,
    MAX_DEPTH,
    PROC_CAP,
    cgroup_quota,
    parse_cfs_period,
    parse_cfs_quota,
    parse_cpu_max,
    parse_proc_cgroup,
    usable_cpus,
)

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


# --- cgroup files that do not parse -------------------------------------------------------------------
# Each is skipped with one warning naming it and what was wrong; the affinity (and any other file that
# parses) still gives the count. The files are a test's own, under a root it passes.

AFFINITY = len(os.sched_getaffinity(0))


def quota_of(tmp_path: Path, proc: str | bytes, files: dict[str, str | bytes]) -> tuple[int, float | None, list]:
    """``usable_cpus`` and ``cgroup_quota`` over ``proc`` (the /proc/self/cgroup text) and ``files`` (path
    under the root: content), and the warnings logged."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    for rel, content in {"cgroup": proc, **{f"root/{k}": v for k, v in files.items()}}.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with capture_logs() as logs:
        n, quota = usable_cpus(tmp_path / "cgroup", root), cgroup_quota(tmp_path / "cgroup", root)
    return n, quota, [e for e in logs if e["log_level"] == "warning"]


def skipped(warnings: list) -> dict[str, str]:
    """The files the first of ``warnings`` names; every call of usable_cpus and cgroup_quota logs once."""
    assert [w["event"] for w in warnings] == ["cgroup_files_skipped"] * 2, warnings
    return warnings[0]["files"]


def test_a_v2_period_of_0_is_skipped_and_the_affinity_counts(tmp_path):
    n, quota, warnings = quota_of(tmp_path, "0::/a\n", {"a/cpu.max": "50000 0\n"})
    assert (n, quota) == (AFFINITY, None)
    assert skipped(warnings) == {str(tmp_path / "root/a/cpu.max"): "the period is not a count from 1 to 2**64-1"}


def test_a_v1_period_of_0_is_skipped(tmp_path):
    n, quota, warnings = quota_of(tmp_path, "4:cpu,cpuacct:/a\n", {
        "cpu,cpuacct/a/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/a/cpu.cfs_period_us": "0\n"})
    assert (n, quota) == (AFFINITY, None)
    assert list(skipped(warnings)) == [str(tmp_path / "root/cpu,cpuacct/a/cpu.cfs_period_us")]


def test_a_400_digit_quota_is_skipped_and_a_quota_above_it_still_counts(tmp_path):
    n, quota, warnings = quota_of(tmp_path, "0::/a\n", {"a/cpu.max": "9" * 400 + " 100000\n",
                                                        "cpu.max": "100000 100000\n"})
    assert (n, quota) == (1, 1.0)  # the root's quota, one core: the bad file alone is left out
    assert skipped(warnings) == {str(tmp_path / "root/a/cpu.max"): f"longer than {FILE_CAP} bytes"}
    # within the cap, a count past the kernel's u64 is not one either
    n, quota, warnings = quota_of(tmp_path, "0::/a\n", {"a/cpu.max": "9" * 30 + " 100000\n"})
    assert skipped(warnings) == {str(tmp_path / "root/a/cpu.max"): "the quota is not a count from 1 to 2**64-1"}


def test_a_proc_cgroup_line_without_colons_is_skipped(tmp_path):
    n, quota, warnings = quota_of(tmp_path, "0::/\ngarbage\n", {"cpu.max": "50000 100000\n"})
    assert (n, quota) == (AFFINITY, None)  # the whole file: a line of it cannot be trusted, nor the rest
    assert skipped(warnings) == {str(tmp_path / "cgroup"): "line 2 is not hierarchy:controllers:/path"}


def test_a_cgroup_path_that_climbs_out_of_the_root_reads_nothing_there(tmp_path):
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # above the root: never read
    n, quota, warnings = quota_of(tmp_path, "0::/..\n", {})
    assert (n, quota) == (AFFINITY, None)
    assert skipped(warnings) == {str(tmp_path / "cgroup"): "line 1: a path with a . or .. step"}


def test_files_past_their_cap_or_not_utf8_are_skipped(tmp_path):
    n, quota, warnings = quota_of(tmp_path, "0::/a\n", {"a/cpu.max": "5" * 300, "cpu.max": b"\xff 100000"})
    assert (n, quota) == (AFFINITY, None)
    assert skipped(warnings) == {str(tmp_path / "root/a/cpu.max"): f"longer than {FILE_CAP} bytes",
                                 str(tmp_path / "root/cpu.max"): "not UTF-8 text"}
    n, quota, warnings = quota_of(tmp_path, "0::/\n" * (PROC_CAP // 4 + 1), {"cpu.max": "50000 100000\n"})
    assert (n, quota) == (AFFINITY, None)
    assert skipped(warnings) == {str(tmp_path / "cgroup"): f"longer than {PROC_CAP} bytes"}


# --- the parsers, with any text -------------------------------------------------------------------------

FUZZ = hsettings(max_examples=300, deadline=timedelta(seconds=2))
# Texts near the formats (digits, "max", colons, slashes, dots) as well as any text, some past the caps.
NEAR = st.text(alphabet=st.sampled_from("0123456789 max:/.-,\n\t\x00cpu"), max_size=80)
TEXT = st.one_of(st.text(max_size=200), NEAR, st.builds(lambda t, k: t * k, NEAR, st.integers(1, 2000)))


def cores(value) -> bool:
    return value is None or (isinstance(value, float) and 0 < value < 2**64 and math.isfinite(value))


@FUZZ
@given(TEXT)
def test_parse_cpu_max_gives_cores_or_says_what_was_wrong(text):
    try:
        assert cores(parse_cpu_max(text))
    except ValueError as e:
        assert str(e) and "\n" not in str(e)


@FUZZ
@given(TEXT)
def test_parse_cfs_gives_counts_or_says_what_was_wrong(text):
    for parse in (parse_cfs_quota, parse_cfs_period):
        try:
            v = parse(text)
            assert (v is None and parse is parse_cfs_quota) or (isinstance(v, int) and 0 < v < COUNT_MAX)
        except ValueError as e:
            assert str(e) and "\n" not in str(e)


@FUZZ
@given(TEXT)
def test_parse_proc_cgroup_gives_paths_under_the_root_or_says_what_was_wrong(text):
    try:
        lines = parse_proc_cgroup(text)
    except ValueError as e:
        assert str(e) and "\n" not in str(e)
        return
    for controllers, parts in lines:
        assert "/" not in controllers and "\x00" not in controllers
        assert len(parts) <= MAX_DEPTH
        assert all(p not in ("", ".", "..") and "/" not in p and "\x00" not in p for p in parts)


BYTES = st.one_of(st.binary(max_size=100), st.builds(lambda b, k: b * k, st.binary(min_size=1, max_size=40),
                                                     st.integers(1, 3000)), NEAR.map(str.encode))


@hsettings(max_examples=150, deadline=timedelta(seconds=5))
@given(proc=st.one_of(BYTES, st.sampled_from([b"0::/a/b\n", b"4:cpu:/a/b\n", b"0::/a\n4:cpu:/a\n"])),
       v2=BYTES, v1_quota=BYTES, v1_period=BYTES)
def test_usable_cpus_never_fails_whatever_the_files_hold(proc, v2, v1_quota, v1_period):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "a" / "b").mkdir(parents=True)
        (root / "cpu" / "a" / "b").mkdir(parents=True)
        (root / "proc").write_bytes(proc)
        (root / "a" / "cpu.max").write_bytes(v2)
        (root / "cpu" / "a" / "cpu.cfs_quota_us").write_bytes(v1_quota)
        (root / "cpu" / "a" / "cpu.cfs_period_us").write_bytes(v1_period)
        with capture_logs() as logs:
            n = usable_cpus(root / "proc", root)
        assert 1 <= n <= AFFINITY
        assert len(logs) <= 1
