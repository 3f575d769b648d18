"""A child process's tie to its parent: the worker processes of a supervisor die with it.

A supervisor killed outright (SIGKILL, the OOM killer) runs no code, so it
cannot stop its children: left alone they crawl on under PID 1, and a process
manager that starts the supervisor again gets a second set beside them. Two
things stop them, both Linux's:

- **The parent-death signal.** ``bind_to(parent)`` is the ``preexec_fn`` the
  supervisor starts each child with: in the child, between fork and exec, it
  asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``,
  which survives the exec of a program that is not set-user-ID), then checks
  that its parent is still ``parent``: had the supervisor died before the
  request, no signal would come, and the child sends it to itself. SIGTERM, not
  SIGKILL: the child drains as on its supervisor's SIGTERM and hands its
  torrents back. The kernel ties the request to the *thread* that forked,
  not the process: the supervisor starts its children from its main thread
  (``signal.signal`` allows its handlers nowhere else), whose end is the
  process's, and gevent forks in the calling thread (greenlets share it).
- **The heartbeat's look.** A worker bound to its parent (a death signal set:
  ``death_signal()``) notes its parent at start (``bound_parent``); each beat
  compares (``Heartbeat.orphaned``), and a worker whose parent changed stops
  as on SIGTERM. A second look, within a beat (5 s): it needs the request
  to have been made, not the signal to have been delivered and handled.

``bind_to`` also undoes, in the child, what the supervisor does around a
start: SIGTERM and SIGINT are blocked there (``STOP_SIGNALS``, so that a stop
never lands half-way through a start), and a blocked signal stays blocked
across exec. The child sets both back to their default action and unblocks
them before it execs: a SIGTERM that reached it meanwhile ends it there (it
holds nothing yet), and once the worker runs, its own handlers drain it.

Elsewhere than Linux, no death signal is set and ``bound_parent`` is None.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2  # <linux/prctl.h>
# Loaded here, in the parent: the child between fork and exec only calls it.
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def set_death_signal(sig: int) -> bool:
    """Ask for ``sig`` when this process's parent (the thread that forked it) ends; False where not Linux."""
    return _libc is not None and _libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0) == 0


def death_signal() -> int:
    """The signal this process gets when its parent ends: 0 for none (or not Linux)."""
    if _libc is None:
        return 0
    sig = ctypes.c_int(0)
    return sig.value if _libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0) == 0 else 0


def bound_parent() -> int | None:
    """This process's parent when it is bound to it (a death signal set), else None."""
    return os.getppid() if death_signal() else None


def bind_to(parent: int, sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` binding the child to ``parent`` (the supervisor's pid): module note."""

    def bind() -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)  # not the supervisor's handlers, before any exec
        set_death_signal(sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if os.getppid() != parent:  # the parent died before the request: the signal it would have sent
            os.kill(os.getpid(), sig)

    return bind
