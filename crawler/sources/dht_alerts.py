"""libtorrent's alert queue, pumped into gevent without blocking the hub.

How it works: libtorrent calls ``set_alert_notify``'s callback from its own
network thread whenever the alert queue goes from empty to non-empty. That
callback must not call back into libtorrent and must not touch gevent objects
that are not thread-safe, so it only calls ``send()`` on a gevent ``async_``
watcher (libev's ``ev_async_send``, documented by gevent as a watcher "that
fires when triggered, possibly from another thread"). The watcher's callback
then runs in the hub: it calls ``pop_alerts()`` (non-blocking: it swaps the
queue under a mutex) and hands every alert to ``dispatch``. Popping the whole
queue re-arms libtorrent's notification, so there is no polling at all.

``dispatch`` runs inside the hub, so it must never switch greenlets: it only
records values and sets gevent events.

Session statistics (``post_session_stats``) come back as alerts in the order
they were asked for, so ``StatsRequests`` matches them to their askers with a
FIFO of ``AsyncResult``s.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Callable

import gevent
import gevent.monkey
from gevent.event import AsyncResult

# The notify callback runs on a libtorrent thread; a gevent-patched lock would
# be wrong there, so take the OS lock even when the process is monkey-patched.
_allocate_lock = gevent.monkey.get_original("_thread", "allocate_lock")


class AlertPump:
    """Wakes the hub when libtorrent has alerts and dispatches them there.

    ``session``: a ``libtorrent.session``; ``dispatch(alert)`` is called in
    the hub for every alert, must not block and should not raise (an
    exception is printed by gevent and the next alerts still flow).
    """

    def __init__(self, session, dispatch: Callable[[object], None]):
        self._session = session
        self._dispatch = dispatch
        self._lock = _allocate_lock()
        # ref=False: a pending watcher alone does not keep the hub alive.
        self._watcher = gevent.get_hub().loop.async_(ref=False)
        self._watcher.start(self._drain)
        session.set_alert_notify(self._notify)
        # Alerts queued before the callback was installed never notify.
        self._watcher.send()

    def _notify(self) -> None:
        # libtorrent thread: only the thread-safe send(), under a lock so that
        # close() cannot free the watcher in between.
        with self._lock:
            if self._watcher is not None:
                self._watcher.send()

    def _drain(self) -> None:
        # Hub: non-blocking pop of everything queued.
        session = self._session
        if session is None:
            return
        for alert in session.pop_alerts():
            try:
                self._dispatch(alert)
            except Exception:  # one bad alert must not stop the pump
                gevent.get_hub().handle_error(None, *sys.exc_info())

    def close(self) -> None:
        """Stop waking the hub; safe to call twice."""
        with self._lock:
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
            watcher.close()
        self._session = None


class StatsRequests:
    """Asks libtorrent for session counters and returns them to the asker.

    ``post(session)`` posts one request and returns an ``AsyncResult`` that
    receives the counter dict (name -> int); ``on_alert(values)`` is called by
    the dispatcher for each ``session_stats_alert`` and answers the oldest
    pending request (libtorrent answers in order).
    """

    def __init__(self):
        self._pending: deque[AsyncResult] = deque()
        self.latest: dict | None = None

    def post(self, session) -> AsyncResult:
        result = AsyncResult()
        self._pending.append(result)
        session.post_session_stats()
        return result

    def on_alert(self, values: dict) -> None:
        self.latest = values
        if self._pending:
            self._pending.popleft().set(values)

    def fail_all(self, error: BaseException) -> None:
        """Wake every pending asker with ``error`` (used at close)."""
        while self._pending:
            self._pending.popleft().set_exception(error)
