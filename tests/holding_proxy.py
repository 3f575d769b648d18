"""A TCP forwarder to the test Redis that passes a client's first n commands and holds the rest.

A process given ``proxy.url`` instead of the Redis URL talks to the real
Redis. The proxy reads the requests (RESP arrays, as redis-py sends them),
passes the first ``commands`` whole commands of all its connections (or,
given ``hold_at``, every command before the first that ``hold_at`` picks),
then sets ``held`` and drops every later byte while keeping the connections
open; replies always pass. The process is then stuck at a known command, however
fast or slow the machine is: a test can kill it there and know the kill
landed mid-way through a pipeline, with Redis having run exactly a prefix
of it.
"""

from __future__ import annotations

import signal
import time
import urllib.parse
from collections.abc import Callable

import gevent
import gevent.event
from gevent import socket
from gevent.server import StreamServer


def command_end(buf: bytes, start: int) -> int | None:
    """Where the RESP command starting at ``buf[start]`` ends, or None while it is incomplete."""
    eol = buf.find(b"\r\n", start)
    if eol < 0:
        return None
    if buf[start:start + 1] != b"*":
        raise ValueError(f"not a RESP array: {buf[start:start + 20]!r}")
    pos = eol + 2
    for _ in range(int(buf[start + 1:eol])):
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        pos = eol + 2 + int(buf[pos + 1:eol]) + 2  # $<length>\r\n<bytes>\r\n
        if pos > len(buf):
            return None
    return pos


def command_words(buf: bytes, start: int, count: int) -> list[bytes]:
    """The first ``count`` words of the whole RESP command starting at ``buf[start]``."""
    words: list[bytes] = []
    pos = buf.find(b"\r\n", start) + 2
    for _ in range(min(count, int(buf[start + 1:pos - 2]))):
        eol = buf.find(b"\r\n", pos)
        size = int(buf[pos + 1:eol])
        words.append(buf[eol + 2:eol + 2 + size])
        pos = eol + 2 + size + 2
    return words


class HoldingProxy:
    """The forwarder on a loopback port: ``url`` to give the process, ``held`` set once it holds (see the module note).

    ``hold_at``: called with each command's first two words (its name and first argument), in the
    order the proxy reads them; the first command it answers true for is held, with every later one.
    """
    def __init__(self, redis_url: str, commands: int, hold_at: Callable[[list[bytes]], bool] | None = None):
        parts = urllib.parse.urlsplit(redis_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._left = commands
        self._hold_at = hold_at
        self.held = gevent.event.Event()
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        auth = parts.netloc.rpartition("@")[0]
        self.url = urllib.parse.urlunsplit(
            (parts.scheme, f"{auth + '@' if auth else ''}127.0.0.1:{self.server.server_port}", parts.path, parts.query, ""))

    def _handle(self, client, _addr):
        upstream = socket.create_connection(self._target)
        pumps = [gevent.spawn(self._requests, client, upstream), gevent.spawn(self._replies, upstream, client)]
        try:
            gevent.wait(pumps, count=1)  # either side closed
        finally:
            gevent.killall(pumps)
            upstream.close()
            client.close()

    def _requests(self, client, upstream) -> None:
        """Pass whole commands while any are left to pass; then read and drop."""
        pending = b""
        while data := client.recv(65536):
            if self.held.is_set():
                continue
            pending += data
            start = 0
            while self._left > 0 and (end := command_end(pending, start)) is not None:
                if self._hold_at is not None and self._hold_at(command_words(pending, start, 2)):
                    self._left = 0
                    break
                start = end
                self._left -= 1
            upstream.sendall(pending[:start])
            pending = pending[start:]
            if self._left <= 0:
                self.held.set()

    @staticmethod
    def _replies(upstream, client) -> None:
        while data := upstream.recv(65536):
            client.sendall(data)

    def close(self) -> None:
        self.server.stop(timeout=1)


def kill_when_held(redis_url: str, commands: int, start, settle: float = 0.0,
                   hold_at: Callable[[list[bytes]], bool] | None = None):
    """Start a process with ``start(url)`` (a ``subprocess.Popen``) on a proxy to ``redis_url`` that
    passes its first ``commands`` commands (or those before ``hold_at``'s: ``HoldingProxy``), SIGKILL
    it once the proxy holds (after ``settle`` seconds, for the passed commands to run), and return
    the dead process.

    Fails the test when the process exited (whatever its status) or never got there.
    """
    proxy = HoldingProxy(redis_url, commands, hold_at)
    child = start(proxy.url)
    try:
        deadline = time.monotonic() + 60
        while not proxy.held.wait(0.2) and time.monotonic() < deadline:
            if child.poll() is not None:
                break
        assert proxy.held.is_set(), f"the process should reach the held command (it exited {child.poll()})"
        if settle:
            gevent.sleep(settle)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        proxy.close()
    return child

