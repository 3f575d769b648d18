"""A small client for StatHat's EZ API (the PyPI ``stathat`` package does not install: docs/decisions.md).

One ``post`` sends one batch as JSON::

    {"ezkey": "...", "data": [{"stat": "countries.Germany.users", "count": 3},
                              {"stat": "torrents.count", "value": 1234}]}

Standard library only (``urllib``), so it is gevent-friendly once the entry
point has monkey-patched sockets. ``timeout`` bounds the whole post, not each
socket operation: a timer shuts the connection's socket down when it runs
out, so a StatHat that answers a byte at a time cannot hold a post (and the
flusher's claim, which must outlast every post) open longer.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

from crawler.errors import PeercrawlError


class PostError(PeercrawlError):
    """A post to StatHat failed or was refused; nothing in it can be taken as delivered."""


class EZClient:
    """Posts batches of stats to the EZ API at ``url`` with account key ``ezkey``."""

    def __init__(self, url: str, ezkey: str, timeout: float = 10.0):
        self.url, self.ezkey, self.timeout = url, ezkey, timeout
        self.requests = 0  # posts attempted, for metrics and tests

    def post(self, data: list[dict], timeout: float | None = None) -> None:
        """Post ``data`` (``{"stat", "count"|"value"}`` dicts); raises ``PostError``.

        ``timeout``: this post's bound if shorter than the client's (a
        flush running out of time).

        Success is an HTTP 2xx whose JSON body, if any, does not carry a
        ``status`` other than 200 (StatHat answers ``{"status": 200, "msg": "ok"}``).
        """
        body = json.dumps({"ezkey": self.ezkey, "data": data}, ensure_ascii=False).encode("utf-8")
        req = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        self.requests += 1
        timeout = self.timeout if timeout is None else min(self.timeout, timeout)
        conns: list = []
        opener = urllib.request.build_opener(_Handler(conns), _HTTPSHandler(conns))
        timer = threading.Timer(timeout, _shut, (conns,))
        timer.daemon = True
        started = time.monotonic()
        timer.start()
        try:
            with opener.open(req, timeout=timeout) as resp:
                raw = resp.read(65536)
        except urllib.error.HTTPError as e:
            raise PostError(f"StatHat at {self.url} answered HTTP {e.code}") from e
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            if time.monotonic() - started >= timeout:
                raise PostError(f"StatHat at {self.url} did not answer within {timeout:g} s") from e
            raise PostError(f"StatHat at {self.url} is not reachable: {e}") from e
        finally:
            timer.cancel()
        try:
            reply = json.loads(raw) if raw.strip() else {}
        except ValueError:
            reply = {}
        status = reply.get("status") if isinstance(reply, dict) else None
        if status not in (None, 200):
            raise PostError(f"StatHat refused the post: {reply.get('msg', status)!r}")


def _shut(conns: list) -> None:
    """End every connection of one post (its deadline passed): blocked reads return at once."""
    for conn in conns:
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conn.timeout = 0.001  # a connection not yet made fails fast instead


def _recording(cls, conns: list):
    def make(host, **kw):
        conn = cls(host, **kw)
        conns.append(conn)
        return conn

    return make


class _Handler(urllib.request.HTTPHandler):
    def __init__(self, conns: list):
        super().__init__()
        self._conns = conns

    def http_open(self, req):
        return self.do_open(_recording(http.client.HTTPConnection, self._conns), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, conns: list):
        super().__init__()
        self._conns = conns

    def https_open(self, req):
        # the context HTTPSHandler keeps (as its own https_open passes it), undeclared in typeshed
        return self.do_open(_recording(http.client.HTTPSConnection, self._conns), req,
                            context=self._context)  # type: ignore[attr-defined]
