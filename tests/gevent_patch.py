"""pytest plugin: the whole suite runs under gevent's monkey patching, as the worker does.

``peercrawl worker``, ``run`` and ``dashboard`` call ``monkey.patch_all()``
(``crawler.cli.patching``) before anything imports redis-py or ssl
(``crawler.cli.main``), so every
socket, lock, sleep and thread of theirs is a greenlet's. The tests call the
same code in process, and they exercise it as it runs only if they run
patched too.

Where the patch happens, and why here: pyproject's pytest ``addopts`` loads
this module with ``-p tests.gevent_patch`` (``pythonpath = ["."]`` makes
``tests`` importable for a bare ``pytest`` as well as ``python -m pytest``).
``-p`` plugins are imported before the plugins installed as entry points
(pytest-timeout, hypothesis) and before any conftest, so before redis-py,
ssl and the code under test are imported. A patch at the top of
``tests/conftest.py`` would run after those plugins had been imported (and
had made their locks and thread-locals unpatched); a wrapper script
(dramatiq's ``pytest-gevent.py``) would not cover ``python -m pytest``, the
command the README and ``.ci/run`` give. pytest itself has imported ``socket``,
``threading``, ``selectors`` and ``subprocess`` by then; gevent patches those
modules in place, and pytest holds no socket, lock or thread of its own that
the code under test shares. ``tests/test_patched.py`` checks the result.

pytest-timeout's ``thread`` method starts a ``threading.Timer``, which
patched is a greenlet: it could not fire while a test blocks the hub in C
code (libtorrent, a blocking call gevent does not cover). Its
``pytest_timeout_set_timer`` hook is answered here with a real OS thread
(``gevent.monkey.get_original``) that waits on a real lock, so a hung test
still ends the run with every greenlet's stack printed.
"""

from __future__ import annotations

from crawler.cli.patching import patch

patch()

import os  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
from gevent import monkey  # noqa: E402

_start_thread = monkey.get_original("_thread", "start_new_thread")
_new_lock = monkey.get_original("_thread", "allocate_lock")


def _expire(item, settings, cancelled) -> None:
    """Runs on a real thread: wait for the test to end; past the timeout, dump stacks and exit."""
    if cancelled.acquire(True, settings.timeout):
        return
    import gevent.util
    import pytest_timeout

    # pytest_timeout.timeout_timer prints the threads' stacks (only the
    # greenlet that holds the main thread shows there) and calls os._exit;
    # every greenlet's stack goes first, to the real stderr.
    try:
        sys.__stderr__.write("\n".join(gevent.util.format_run_info()) + "\n")
        sys.__stderr__.flush()
    except Exception:  # noqa: BLE001 - best effort: the exit below must happen
        pass
    pytest_timeout.timeout_timer(item, settings)


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_set_timer(item, settings):
    """A timeout on a real thread for the ``thread`` method; the ``signal`` method is pytest-timeout's own."""
    if settings.method != "thread":
        return None
    cancelled = _new_lock()
    cancelled.acquire()
    _start_thread(_expire, (item, settings, cancelled))

    def cancel() -> None:
        # pytest-timeout cancels twice when a test fails (on the failure's
        # report, then at the end of the test): the second is a no-op.
        if cancelled.locked():
            cancelled.release()

    item.cancel_timeout = cancel
    return True


class _Flag:
    """``threading.Event``'s set, clear, is_set and wait, for a flag set on a real thread and
    waited for by a greenlet: the waiter polls, so the hub keeps running meanwhile."""

    def __init__(self):
        self._set = False

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        import time

        import gevent

        end = None if timeout is None else time.monotonic() + timeout
        while not self._set:
            if end is not None and time.monotonic() >= end:
                return False
            gevent.sleep(0.002)
        return True


def _xdist_worker() -> None:
    """A pytest-xdist worker takes the controller's commands on execnet's reader, a real thread
    started before this patch, and queues them for the main thread (here a greenlet) with locks and
    an event it makes after it: patched, those would be greenlet locks shared with a real thread, and
    the main greenlet waiting for the next test would end in gevent's LoopExit (its hub has nothing
    else to wait for). The queue gets a real lock and a flag the main greenlet polls."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import _thread

    from execnet import gateway_base

    model = gateway_base.MainThreadOnlyExecModel
    model.Lock = model.RLock = lambda self: _thread.RLock()
    model.Event = lambda self: _Flag()


_xdist_worker()
