"""A stop that comes while the supervisor is starting its children (workers/supervisor.py): every child
started gets the SIGTERM and drains, none starts after it, and a child that had to be killed makes the
supervisor exit 1.

The supervisor runs here, in the test's process, over small children that record that they are up and
that they drained. The SIGTERM comes at a set point of the start-up, not after a guessed sleep: the argv
of child ``k`` is read by ``Popen`` as the supervisor starts it, and reading it waits until children
0..k-1 are up, then sends SIGTERM to this process. The stop thus lands half-way through the start of
child ``k``, with ``k`` children already running and more still to start. Sent to the process, the signal
goes to a thread that does not block it (pytest-timeout's, here): its handler runs in the main thread
during the start all the same; sent to the main thread, it waits there until the start is over.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from gevent import monkey
from structlog.testing import capture_logs

from workers.supervisor import Supervisor

# argv[1]: where to record; argv[2]: "drain" (exit 0 on SIGTERM) or "ignore" (SIGTERM changes nothing).
CHILD = """
import os, signal, sys, time
mark, how = sys.argv[1], sys.argv[2]
def drain(*_):
    open(mark + ".drained", "w").close()
    os._exit(0)
signal.signal(signal.SIGTERM, drain if how == "drain" else signal.SIG_IGN)
with open(mark + ".up", "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(60)
"""


class StopWhileStarting(list):
    """An argv that, read to start its child, waits until ``ups`` exist and then sends SIGTERM to this
    process (module note)."""

    def __init__(self, argv: list[str], ups: list[Path], send):
        super().__init__(argv)
        self.ups, self.send, self.fired = ups, send, False

    def __iter__(self):
        if not self.fired:
            self.fired = True
            end = time.monotonic() + 60
            while not all(p.exists() for p in self.ups):
                assert time.monotonic() < end, "the first children never came up"
                time.sleep(0.05)
            self.send(signal.SIGTERM)
        return super().__iter__()


def to_process(sig: int) -> None:
    os.kill(os.getpid(), sig)


def to_main_thread(sig: int) -> None:
    """``sig`` to the thread running the supervisor (this one), by its pthread id, not gevent's."""
    signal.pthread_kill(monkey.get_original("_thread", "get_ident")(), sig)


def supervise(tmp_path: Path, hows: list[str], stop_at: int, shutdown: float,
              send=to_process) -> tuple[int, Supervisor, list, list]:
    """Run a supervisor of ``len(hows)`` children stopped (``send``) during the start of child ``stop_at``:
    (its exit status, the supervisor, the marks' paths, the logs)."""
    marks = [tmp_path / f"child{i}" for i in range(len(hows))]
    argvs = [[sys.executable, "-c", CHILD, str(m), how] for m, how in zip(marks, hows)]
    argvs[stop_at] = StopWhileStarting(argvs[stop_at], [Path(f"{m}.up") for m in marks[:stop_at]], send)
    sup = Supervisor(argvs, shutdown=shutdown)
    try:
        with capture_logs() as logs:
            code = sup.run()
    finally:  # whatever went wrong, no child is left behind
        for m in marks:
            up = Path(f"{m}.up")
            if up.exists() and up.read_text():
                try:
                    p = psutil.Process(int(up.read_text()))
                    if str(m) in p.cmdline():
                        p.kill()
                except psutil.NoSuchProcess:
                    pass
    return code, sup, marks, logs


@pytest.mark.parametrize("send", [to_process, to_main_thread])
def test_a_sigterm_during_start_up_reaches_every_child_started_and_starts_no_other(tmp_path, send):
    code, sup, marks, logs = supervise(tmp_path, ["drain"] * 10, stop_at=5, shutdown=5.0, send=send)
    up = [Path(f"{m}.up").exists() for m in marks]
    assert up[6:] == [False] * 4, "a child started after the stop"
    assert all(Path(f"{m}.drained").exists() for m in marks[:5]), "a child started before the stop did not drain"
    # The sixth was being started when the signal came: it got the SIGTERM too (it may end by its
    # default action, before its handler is there) and was not killed.
    assert (code, sup.killed) == (0, set()), logs
    assert not any(e["event"] == "worker_child_killed" for e in logs)


def test_a_child_that_had_to_be_killed_makes_the_supervisor_exit_1(tmp_path):
    # The second ignores SIGTERM: killed 5 s (KILL_AFTER) past the 0.5 s shutdown time; the others drain.
    code, sup, marks, logs = supervise(tmp_path, ["drain", "ignore", "drain"], stop_at=2, shutdown=0.5)
    assert code == 1, logs
    assert sup.killed == {1}
    assert [e["child"] for e in logs if e["event"] == "worker_child_killed"] == [1]
    assert Path(f"{marks[0]}.drained").exists()
