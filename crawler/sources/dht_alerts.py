"""libtorrent's alert queue, pumped into gevent without blocking the hub.

How it works: libtorrent calls its alert-notify function from its own network
thread, while holding its alert mutex, whenever the alert queue goes from
empty to non-empty. We use ``set_alert_fd``: the notify function is then the
binding's C++ one that writes a byte to a file descriptor, so no Python code
ever runs on a libtorrent thread. The read end of that pipe is a gevent
``io`` watcher; its callback runs in the hub, drains the pipe, then calls
``pop_alerts()`` (non-blocking: it swaps the queue under the mutex) and hands
the whole batch to ``dispatch``. Popping the whole queue re-arms
libtorrent's notification, so nothing polls.

Why not ``set_alert_notify(python_callback)`` waking an ``async_`` watcher
(whose ``send()`` is thread-safe): that callback needs the GIL on libtorrent's
thread while it holds the alert mutex, and the session's destructor holds the
GIL while it waits for that thread. We measured the deadlock: about one close
in five hung forever.

``dispatch`` runs inside the hub, so it must never switch greenlets: it only
records values and sets gevent events.

Session statistics (``post_session_stats``) come back as alerts in the order
they were asked for, so ``StatsRequests`` matches them to their askers with a
FIFO of ``AsyncResult``s; ``responses`` reads how many responses a node had
received from such counters.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent
from gevent.event import AsyncResult

if TYPE_CHECKING:
    from gevent._types import _IoWatcher

_READ = 1  # libev/libuv EV_READ

# Incoming queries counted in dht_messages_in; the rest are responses.
_QUERY_COUNTERS = (
    "dht.dht_ping_in", "dht.dht_find_node_in", "dht.dht_get_peers_in", "dht.dht_announce_peer_in",
    "dht.dht_get_in", "dht.dht_put_in", "dht.dht_sample_infohashes_in",
)


class AlertPump:
    """Wakes the hub when libtorrent has alerts and dispatches them there.

    ``session``: a ``libtorrent.session``; ``dispatch(alerts)`` is called in
    the hub with each batch ``pop_alerts()`` returned (a list, oldest first);
    it must not block and should handle its own errors per alert (an
    exception that escapes is reported by the hub and drops the rest of that
    batch; later batches still flow).
    """

    def __init__(self, session, dispatch: Callable[[list], None]):
        self._session = session
        self._dispatch = dispatch
        self._rfd, self._wfd = os.pipe()
        # Non-blocking both ways: libtorrent's write never stalls its thread
        # (a full pipe already means a wake-up is pending), our drain never
        # stalls the hub.
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        # unref: a pending pump alone does not keep the hub alive.
        self._watcher: _IoWatcher | None = gevent.get_hub().loop.io(self._rfd, _READ, ref=False)
        self._watcher.start(self._drain)
        session.set_alert_fd(self._wfd)
        # Alerts queued before the fd was installed never notify.
        os.write(self._wfd, b"\0")

    def _drain(self) -> None:
        # Hub: empty the pipe first, so a notification that lands after
        # pop_alerts() wakes us again.
        try:
            while len(os.read(self._rfd, 4096)) == 4096:
                pass
        except BlockingIOError:
            pass
        session = self._session
        if session is None:
            return
        alerts = session.pop_alerts()
        if alerts:
            try:
                self._dispatch(alerts)
            except Exception:  # noqa: BLE001 (the pump must keep running)
                gevent.get_hub().handle_error(None, *sys.exc_info())

    def detach(self) -> None:
        """Stop libtorrent writing to our pipe; call before freeing the session.

        After ``set_alert_fd(-1)`` returns (it takes the alert mutex the
        notifier holds) libtorrent writes to fd -1, a harmless EBADF, so our
        pipe's numbers can be reused safely.
        """
        if self._session is not None:
            self._session.set_alert_fd(-1)
            self._session = None

    def close(self) -> None:
        """Detach, stop waking the hub and close the pipe; safe to call twice."""
        self.detach()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.close()
            self._watcher = None
            os.close(self._rfd)
            os.close(self._wfd)


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
        self._last: AsyncResult | None = None
        self._last_at = 0.0

    def post(self, session) -> AsyncResult:
        """Ask ``session`` for its counters; the result is set when the alert arrives."""
        result: AsyncResult = AsyncResult()
        self._pending.append(result)
        session.post_session_stats()
        self._last, self._last_at = result, time.monotonic()
        return result

    def baseline(self, session, max_age: float = 0.25) -> AsyncResult:
        """Counters taken no later than anything posted after this call.

        Reuses the newest request if it is unanswered (posted earlier, so it
        still precedes what the caller posts next) or younger than
        ``max_age`` seconds (an earlier baseline only widens the window in
        which a response counts, by at most ``max_age``). Under load one
        stats alert then serves every lookup started meanwhile; each alert
        carries ~300 counters, which costs more than the lookup itself.
        """
        last = self._last
        if last is not None and (not last.ready() or time.monotonic() - self._last_at < max_age):
            return last
        return self.post(session)

    def on_alert(self, values: dict) -> None:
        """The dispatcher's call: keep ``values`` and answer the oldest pending request."""
        self.latest = values
        if self._pending:
            self._pending.popleft().set(values)

    def fail_all(self, error: BaseException) -> None:
        """Wake every pending asker with ``error`` (used at close)."""
        while self._pending:
            self._pending.popleft().set_exception(error)


def responses(values: dict) -> int:
    """Responses the DHT node received, from a counter dict: ``dht_messages_in`` less incoming queries."""
    return values.get("dht.dht_messages_in", 0) - sum(values.get(k, 0) for k in _QUERY_COUNTERS)
