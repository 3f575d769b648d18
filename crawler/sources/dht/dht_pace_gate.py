"""Where DHT lookups wait for the pacer to let their traversal start.

``NodePacer`` (dht_pacing) only answers whether a traversal may start now and
when that answer may next change; it never waits. A lookup it refuses sleeps
here until the pacer may say yes: woken when another lookup ends (``wake``),
or when the pacer's next query leaves its window, whichever comes first.
"""

from __future__ import annotations

import time

from gevent.event import Event

from crawler.sources.dht.dht_pacing import NodePacer


class PaceGate:
    """The lookups of one ``DhtSource`` waiting for ``pacer``.

    ``paced``: lookups that had to wait. ``close`` wakes every waiter (its
    wait then fails) and fails every later one.
    """

    def __init__(self, pacer: NodePacer):
        self.pacer = pacer
        self._wake = Event()  # replaced each time it fires
        self._waiters = 0
        self._closed = False
        self.paced = 0

    def wait(self, deadline: float) -> bool:
        """Sleep until the pacer lets a traversal start; False at the deadline or close."""
        self.paced += 1
        self._waiters += 1
        try:
            while not self._closed:
                now = time.monotonic()
                if self.pacer.ready(now):
                    return True
                if now >= deadline:
                    return False
                # Woken by a lookup ending, or when a query leaves the window.
                self._wake.wait(timeout=min(deadline - now, self.pacer.next_change(now) + 0.001))
            return False
        finally:
            self._waiters -= 1

    def wake(self) -> None:
        """A lookup ended: let the waiters ask the pacer again."""
        if self._waiters:
            wake, self._wake = self._wake, Event()
            wake.set()

    def close(self) -> None:
        """Wake every waiter for good: the source is closing."""
        self._closed = True
        self._wake.set()
