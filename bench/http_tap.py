"""An HTTP tracker's front for benchmarks: counts what the tracker receives and states its intervals.

Usage: python bench/http_tap.py TARGET_PORT [--interval SECONDS]

Listens on 127.0.0.1 (a free port, printed as the first line of stdout) and
forwards each request to the opentracker on 127.0.0.1:TARGET_PORT, one
connection each (opentracker answers HTTP/1.0 and closes). On the way back
the reply's ``interval`` and ``min interval`` become ``--interval`` (and
its Content-Length follows): opentracker's own are fixed at build (30 and
15 minutes), and a benchmark of a crawl revisiting every minute wants its
tracker to say a minute, as a tracker an operator configured would.

It counts what the tracker received, by kind: ``announce``, ``withdrawal``
(an announce with ``event=stopped``), ``scrape`` requests and the
``info_hash`` they carried (``scrape_hashes``). ``GET /tap-stats`` answers
those counts as JSON (not forwarded). A process of its own, with threads and
no gevent, so its work is not the worker's.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import socketserver
import sys
import threading
import urllib.parse

COUNTS = {"announce": 0, "withdrawal": 0, "scrape": 0, "scrape_hashes": 0, "other": 0}
LOCK = threading.Lock()


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _count(target: str) -> None:
    path, _, query = target.partition("?")
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    with LOCK:
        if path.rsplit("/", 1)[-1].startswith("scrape"):
            COUNTS["scrape"] += 1
            COUNTS["scrape_hashes"] += len(params.get("info_hash", []))
        elif path.rsplit("/", 1)[-1].startswith("announce"):
            COUNTS["withdrawal" if params.get("event") == ["stopped"] else "announce"] += 1
        else:
            COUNTS["other"] += 1


def _restate(reply: bytes, interval: int | None) -> bytes:
    """``reply`` with its intervals set to ``interval`` and its Content-Length made right."""
    head, sep, body = reply.partition(b"\r\n\r\n")
    if interval is None or not sep:
        return reply
    body = re.sub(rb"8:intervali\d+e", b"8:intervali%de" % interval, body)
    body = re.sub(rb"12:min intervali\d+e", b"12:min intervali%de" % interval, body)
    head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), head)
    return head + sep + body


class Handler(socketserver.BaseRequestHandler):
    """One request: counted, forwarded, its reply restated (or the counts, for ``/tap-stats``)."""

    target_port = 0
    interval: int | None = None

    def handle(self) -> None:
        """Serve one connection's request."""
        request = _read_head(self.request)
        line = request.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) >= 2 and parts[1] == "/tap-stats":
            with LOCK:
                body = json.dumps(COUNTS).encode()
            self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        if len(parts) >= 2:
            _count(parts[1])
        with socket.create_connection(("127.0.0.1", self.target_port), timeout=10) as up:
            up.sendall(request)
            reply = b""
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                reply += chunk
        self.request.sendall(_restate(reply, self.interval))


class Server(socketserver.ThreadingTCPServer):
    """A thread per connection; a backlog deep enough for a worker's bursts."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


def main() -> None:
    """Serve until killed; the port on stdout first."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target_port", type=int)
    ap.add_argument("--interval", type=int, default=None)
    a = ap.parse_args()
    Handler.target_port, Handler.interval = a.target_port, a.interval
    with Server(("127.0.0.1", 0), Handler) as server:
        print(server.server_address[1], flush=True)
        sys.stdout.close()
        server.serve_forever()


if __name__ == "__main__":
    main()
