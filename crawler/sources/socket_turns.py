"""A socket reader's turns: it gives the hub back every few datagrams or milliseconds, so a flood freezes nothing.

Why. A gevent socket's ``recvfrom`` returns at once while the kernel holds a
datagram, and only waits (letting the hub run every other greenlet) when
none is there. A reader greenlet fed faster than it reads therefore never
waits: a sender who keeps a UDP socket's buffer full keeps the whole worker
(visits, Redis replies, timers) waiting for as long as it sends. Every UDP
reader of the worker (``krpc_socket``, ``udp_client``) counts its datagrams
through a ``Turns`` and so gives the hub a turn after at most ``every``
datagrams or ``seconds`` of its own work, whichever comes first.

How. A turn is a wait for the socket to be readable (``wait_read``): the
reader is resumed in the hub's next poll for I/O, with every other socket
and timer that is ready then, and after the greenlets already queued to
run, just as if its ``recvfrom`` had had to wait. Neither of gevent's other
ways to yield will do: ``sleep(0)`` queues the reader among the callbacks,
which the hub may run fifty at a time before it polls and fires timers,
and ``idle()`` resumes it only when nothing else is ready, so a busy hub
would never read the socket again.
"""

from __future__ import annotations

import time

from gevent.socket import wait_read

EVERY = 32  # datagrams between turns
SECONDS = 0.002  # seconds of the reader's work between turns


class Turns:
    """Call ``took()`` after each datagram: it yields to the hub when ``every`` datagrams or ``seconds`` passed."""

    __slots__ = ("fileno", "every", "seconds", "given", "_count", "_since")

    def __init__(self, fileno: int, every: int = EVERY, seconds: float = SECONDS):
        if every < 1 or not seconds > 0:
            raise ValueError("a reader's turn comes after at least one datagram and some positive time")
        self.fileno, self.every, self.seconds = fileno, every, seconds
        self.given = 0  # turns handed to the hub
        self._count = 0
        self._since = time.perf_counter()

    def took(self) -> None:
        """One datagram handled; give the hub its turn if it is due."""
        self._count += 1
        if self._count >= self.every or time.perf_counter() - self._since >= self.seconds:
            self.given += 1
            wait_read(self.fileno)
            self._count = 0
            self._since = time.perf_counter()
