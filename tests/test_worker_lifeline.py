"""A supervisor's children die with it (workers/lifeline.py): the parent-death signal set between fork and
exec, the check that closes the window before it, and the heartbeat's look at the parent when the signal
does not come; against real processes, the real ``peercrawl worker --processes 2`` and the test Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.test_worker_e2e import PEERCRAWL, ROOT, env, pcj  # noqa: F401 (fixture)
from tests.test_worker_processes import children, wait_for
from workers.lifeline import STOP_SIGNALS, bind_to, death_signal

# What a child reports: its death signal, the stop signals it has blocked, whether it ran at all.
PROBE = ("import signal, sys; from workers.lifeline import death_signal; "
         "print(death_signal(), sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])), flush=True)")


def alive(pids) -> set[int]:
    """The pids still running (a zombie waiting for its reaper runs no code)."""
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_a_child_is_bound_to_its_parent_and_takes_the_stop_signals_again():
    # The supervisor blocks SIGTERM and SIGINT around a start; the child gets neither blocked across its
    # exec, and its death signal (SIGTERM) survives the exec of python.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        p = subprocess.Popen([sys.executable, "-c", PROBE], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             preexec_fn=bind_to(os.getpid()))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and out.split(" ", 1) == [str(int(signal.SIGTERM)), "[]\n"], out
    assert death_signal() == 0  # the parent's own is untouched


def test_a_child_whose_parent_is_already_gone_exits_before_it_runs(tmp_path):
    # Were the supervisor to die between the fork and the request, no signal would come: the child sees
    # another parent than the one it was started for and sends itself that signal before exec.
    ran = tmp_path / "ran"
    p = subprocess.Popen([sys.executable, "-c", f"open({str(ran)!r}, 'w')"], preexec_fn=bind_to(os.getpid() + 10**7))
    assert p.wait(timeout=30) == -signal.SIGTERM and not ran.exists()


@pytest.mark.slow
def test_children_die_with_a_supervisor_killed_outright(env):  # noqa: F811
    env["PEERCRAWL_SHUTDOWN_SECONDS"] = "5"
    w = subprocess.Popen(PEERCRAWL + ["worker", "--processes", "2", "--concurrency", "2"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    kids: set[int] = set()
    try:
        kids = wait_for(lambda: c if len(c := children(w.pid)) == 2 else None, 30, "two worker processes")
        wait_for(lambda: len(pcj(env, "status")["workers"]) == 2, 60, "both workers running")
        w.send_signal(signal.SIGKILL)
        w.wait(timeout=10)
        # SIGTERM from the kernel at once: each drains as on its supervisor's SIGTERM (within 5 s here)
        end = time.monotonic() + 15
        while alive(kids) and time.monotonic() < end:
            time.sleep(0.1)
        assert alive(kids) == set(), "children outlived their supervisor"
    finally:
        for pid in alive(kids):
            os.kill(pid, signal.SIGKILL)
        if w.poll() is None:
            w.kill()
    # their log lines went to the pipes the dead supervisor read: only the registry shows the drain
    assert pcj(env, "status")["workers"] == []  # each left the registry: a drain, not a death


# A parent that binds its child to itself with a death signal the child ignores (SIGWINCH): as if the
# SIGTERM never came, so only the worker's heartbeat can see that its parent is gone.
QUIET_PARENT = """
import ctypes, signal, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
child = subprocess.Popen(sys.argv[1:], preexec_fn=lambda: libc.prctl(1, signal.SIGWINCH, 0, 0, 0))
print(child.pid, flush=True)
child.wait()
"""


@pytest.mark.slow
def test_a_worker_whose_parent_is_gone_stops_at_its_next_heartbeat(env, tmp_path):  # noqa: F811
    env["PEERCRAWL_SHUTDOWN_SECONDS"] = "5"
    log = tmp_path / "worker.log"
    with open(log, "w") as err:
        parent = subprocess.Popen([sys.executable, "-c", QUIET_PARENT, *PEERCRAWL, "worker", "--concurrency", "2"],
                                  env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        wait_for(lambda: len(pcj(env, "status")["workers"]) == 1, 60, "the worker running")
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        # a heartbeat every 5 s, then a drain within 5 s
        end = time.monotonic() + 30
        while alive([worker]) and time.monotonic() < end:
            time.sleep(0.2)
        assert alive([worker]) == set(), "the worker outlived its parent"
    finally:
        if worker is not None and alive([worker]):
            os.kill(worker, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
    text = log.read_text()
    assert '"worker_orphaned"' in text and '"worker_stopped"' in text, text[-2000:]
    assert pcj(env, "status")["workers"] == []
