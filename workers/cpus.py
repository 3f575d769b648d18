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
core idle), and at least 1.

The cgroup files are read as untrusted text, by pure parsers
(``parse_proc_cgroup``, ``parse_cpu_max``, ``parse_cfs_quota``,
``parse_cfs_period``) that return a
value or raise ``ValueError`` with what was wrong: each file is read up to a
cap (``PROC_CAP``, ``FILE_CAP``), its numbers are decimal counts below 2**64
(the kernel's own type), a period is never 0, and a cgroup's path has no
``.`` or ``..`` step, no name longer than a file name may be and at most
``MAX_DEPTH`` levels. A file that cannot be read (absent, not allowed) is no
quota, as at any level without one; a file that does not parse is skipped
too, and one warning names each such file and what was wrong: the affinity
still bounds the count.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from crawler import logs

log = logs.get("worker.cpus")

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# /proc/self/cgroup holds one line per hierarchy (a dozen under v1); a quota file one short line.
PROC_CAP, FILE_CAP = 64 * 1024, 256
# The kernel nests cgroups far less deep (cgroup.max.depth); past this a path is not a real one.
MAX_DEPTH = 64
NAME_MAX = 255  # bytes of one file name
COUNT_MAX = 2**64  # quotas and periods are u64 in the kernel
_LINE = re.compile(r"([0-9]+):([^/:\x00]*):(/[^\x00]*)")
_COUNT = re.compile(r"[0-9]{1,20}")


def usable_cpus(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> int:
    """The cores this process may run on: its affinity, bounded by its cgroups' CPU quota (module note)."""
    n = len(os.sched_getaffinity(0))
    quota = cgroup_quota(proc_cgroup, root)
    if quota is not None:
        n = min(n, math.ceil(quota))
    return max(1, n)


def cgroup_quota(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota, in cores, of this process's cgroups and the ones above them; None: none.
    Files that do not parse are skipped, with one warning (module note)."""
    skipped: dict[str, str] = {}
    found: list[float] = []
    for controllers, parts in _parsed(proc_cgroup, parse_proc_cgroup, skipped) or []:
        if controllers == "":  # cgroup v2: one hierarchy at the root
            found += _each_level(root, parts, _v2, skipped)
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own mount
            base = next((root / c for c in (controllers, "cpu,cpuacct", "cpu") if _is_dir(root / c)), None)
            if base is not None:
                found += _each_level(base, parts, _v1, skipped)
    if skipped:
        log.warning("cgroup_files_skipped", files=skipped,
                    message="these cgroup files do not parse: their CPU quota is not counted")
    return min(found) if found else None


def parse_proc_cgroup(text: str) -> list[tuple[str, list[str]]]:
    """``/proc/self/cgroup``: each line's controllers ("" for cgroup v2) and its cgroup's path as a list
    of names. Raises ``ValueError``."""
    out = []
    for n, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        m = _LINE.fullmatch(line)
        if m is None:
            raise ValueError(f"line {n} is not hierarchy:controllers:/path")
        parts = [p for p in m.group(3).split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(f"line {n}: a path with a . or .. step")
        if len(parts) > MAX_DEPTH or any(len(p.encode("utf-8", "surrogatepass")) > NAME_MAX for p in parts):
            raise ValueError(f"line {n}: a path deeper than {MAX_DEPTH} levels or with a name over {NAME_MAX} bytes")
        out.append((m.group(2), parts))
    return out


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2's ``cpu.max``, ``"<quota> <period>"`` or ``"max <period>"``: cores, or None for no quota.
    Raises ``ValueError``."""
    fields = text.split()
    if len(fields) != 2:
        raise ValueError("not '<quota> <period>'")
    period = _count(fields[1], "period")
    return None if fields[0] == "max" else _count(fields[0], "quota") / period


def parse_cfs_quota(text: str) -> int | None:
    """cgroup v1's ``cpu.cfs_quota_us``: microseconds per period, or None for no quota (-1).
    Raises ``ValueError``."""
    return None if text.strip() == "-1" else _count(text.strip(), "quota")


def parse_cfs_period(text: str) -> int:
    """cgroup v1's ``cpu.cfs_period_us``: microseconds. Raises ``ValueError``."""
    return _count(text.strip(), "period")


def _count(text: str, what: str) -> int:
    """A positive decimal count below ``COUNT_MAX``; raises ``ValueError`` naming ``what``."""
    n = int(text) if _COUNT.fullmatch(text) else None
    if n is None or not 0 < n < COUNT_MAX:
        raise ValueError(f"the {what} is not a count from 1 to 2**64-1")
    return n


def _read(path: Path, cap: int) -> str | None:
    """``path``'s text, None when it cannot be read; raises ``ValueError`` past ``cap`` bytes or not UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except (OSError, ValueError):  # absent, not allowed, a name the system refuses
        return None
    if len(data) > cap:
        raise ValueError(f"longer than {cap} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def _parsed(path: Path, parse, skipped: dict[str, str], cap: int = PROC_CAP):
    """``parse`` of ``path``'s text; None when it cannot be read or does not parse (then noted in ``skipped``)."""
    try:
        text = _read(path, cap)
        return None if text is None else parse(text)
    except ValueError as e:
        skipped[str(path)] = str(e)
        return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _each_level(base: Path, parts: list[str], read, skipped: dict[str, str]) -> list[float]:
    """``read(dir)`` of the cgroup at ``parts`` under ``base`` and of every one above it, where set."""
    out = []
    for depth in range(len(parts), -1, -1):
        q = read(base.joinpath(*parts[:depth]), skipped)
        if q is not None:
            out.append(q)
    return out


def _v2(d: Path, skipped: dict[str, str]) -> float | None:
    return _parsed(d / "cpu.max", parse_cpu_max, skipped, FILE_CAP)


def _v1(d: Path, skipped: dict[str, str]) -> float | None:
    quota = _parsed(d / "cpu.cfs_quota_us", parse_cfs_quota, skipped, FILE_CAP)
    if quota is None:
        return None
    period = _parsed(d / "cpu.cfs_period_us", parse_cfs_period, skipped, FILE_CAP)
    return None if period is None else quota / period
