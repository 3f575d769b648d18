"""Redis round trips timed outside the gevent loop (``--concurrency auto``).

The autoscaler weighs how long Redis takes to answer against the best it has
seen. Timed through the worker's own client, the figure would hold how long
the PING waited for the event loop, which is the lag the autoscaler measures
apart. So a plain blocking socket (gevent's original, not the patched one)
sends a PING and reads one line: any reply, NOAUTH included, is a round trip.
A TLS or cluster client, whose connection this cannot copy, is timed through
the client instead.
"""

from __future__ import annotations

import time

import redis
from gevent import monkey

# A blocking round trip longer than this counts as this long (the probe must
# not stall the process while Redis is unreachable).
RAW_TIMEOUT = 0.25


class RoundTrip:
    """Times one Redis round trip at a time to ``client``'s Redis (``measure``); ``close`` when done."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self._raw = None  # a blocking socket to Redis, False when not possible

    def _open(self):
        """A plain blocking socket to the client's Redis, or False (TLS, cluster, unknown)."""
        pool = getattr(self.client, "connection_pool", None)
        kw = getattr(pool, "connection_kwargs", None) or {}
        cls = getattr(pool, "connection_class", None)
        real_socket = monkey.get_original("socket", "socket")
        import socket as _s

        try:
            if cls is redis.connection.UnixDomainSocketConnection and kw.get("path"):
                s = real_socket(_s.AF_UNIX, _s.SOCK_STREAM)
                s.settimeout(RAW_TIMEOUT)
                s.connect(kw["path"])
            elif cls is redis.connection.Connection and kw.get("host"):
                infos = _s.getaddrinfo(kw["host"], kw.get("port", 6379), type=_s.SOCK_STREAM)
                family, _, _, _, addr = infos[0]
                s = real_socket(family, _s.SOCK_STREAM)
                s.settimeout(RAW_TIMEOUT)
                s.connect(addr)
                s.setsockopt(_s.IPPROTO_TCP, _s.TCP_NODELAY, 1)
            else:
                return False
        except OSError:
            return None  # try again next time
        return s

    def measure(self) -> float | None:
        """One Redis round trip in seconds (PING; any reply, NOAUTH included, is a round trip)."""
        if self._raw is None:
            self._raw = self._open()
        if self._raw:
            t = time.perf_counter()
            try:
                self._raw.sendall(b"*1\r\n$4\r\nPING\r\n")
                data = b""
                while not data.endswith(b"\r\n"):
                    chunk = self._raw.recv(256)
                    if not chunk:
                        raise OSError("closed")
                    data += chunk
                rtt = time.perf_counter() - t
            except OSError:
                self.close()
                rtt = RAW_TIMEOUT
        elif self._raw is False:
            t = time.perf_counter()
            try:
                self.client.ping()
            except redis.RedisError:
                return None
            rtt = time.perf_counter() - t
        else:
            return None
        return rtt

    def close(self) -> None:
        """Close the blocking socket."""
        if self._raw:
            try:
                self._raw.close()
            except OSError:
                pass
        self._raw = None

