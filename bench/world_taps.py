"""Taps in front of bench_world's trackers: what each tracker receives, counted from outside the crawler.

Usage: python bench/world_taps.py PLAN.json

PLAN.json: ``{"interval": S, "taps": [{"name", "host", "same_port", "udp", "http"}]}``,
where ``udp`` and ``http`` are each ``null`` (no such face) or ``{"target": [ip,
port] or null, "delay": seconds}``. Each face listens on ``host`` (one port
for both faces when ``same_port``, as one opentracker serves both) and
forwards what it receives to ``target``; a UDP face without a target is a
black hole (it reads and never answers: what a dead UDP tracker looks like
to a crawler whose socket is not connected, since the port-unreachable a
closed port sends back does not reach it). ``delay`` holds each reply that
long before sending it (a slow tracker). Replies to announces state ``S``
as their interval (UDP: the interval field; HTTP: ``interval`` and ``min
interval``): the trackers behind say what they were built with, and a crawl
revisiting every minute wants its trackers to say a minute, as trackers an
operator configured would.

Counted per face: UDP ``connect``, ``announce``, ``withdrawal`` (an announce
with event ``stopped``), ``scrape`` datagrams and the ``scrape_hashes`` in
them, ``other``; the replies by action; HTTP ``announce``, ``withdrawal``,
``scrape`` requests and their hashes, ``other``, and requests the tracker
behind did not answer (``failed``). Per info-hash, over both faces, what its
requests cost the tracker: a scrape carrying n hashes is 1/n to each, an
announce or a withdrawal 1.

Prints one JSON line, ``{"control": port, "taps": {name: {"udp": port, "http":
port}}}``, then serves ``GET /stats`` on 127.0.0.1:control (the counts as
JSON). A process of its own, threads and no gevent, so its work is not the
worker's; it exits when its standard input closes.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAGIC = 0x41727101980
LOCK = threading.Lock()
COUNTS: dict[str, dict] = {}  # tap name -> {"udp": {...}, "http": {...}, "hashes": {hex: [cost]}}


def _count(name: str, face: str, kind: str, n: int = 1) -> None:
    with LOCK:
        c = COUNTS[name][face]
        c[kind] = c.get(kind, 0) + n


def _cost(name: str, hashes: list[bytes], each: float) -> None:
    with LOCK:
        per = COUNTS[name]["hashes"]
        for h in hashes:
            key = h.hex()
            per[key] = per.get(key, 0.0) + each


def udp_request(data: bytes) -> tuple[str, list[bytes]]:
    """The kind of a UDP tracker request (BEP 15) and the info-hashes it names."""
    if len(data) < 16:
        return "other", []
    if int.from_bytes(data[:8], "big") == MAGIC and int.from_bytes(data[8:12], "big") == 0:
        return "connect", []
    action = int.from_bytes(data[8:12], "big")
    if action == 1 and len(data) >= 98:
        return ("withdrawal" if int.from_bytes(data[80:84], "big") == 3 else "announce"), [data[16:36]]
    if action == 2:
        n = (len(data) - 16) // 20
        return "scrape", [data[16 + 20 * i:36 + 20 * i] for i in range(n)]
    return "other", []


def restate_udp(reply: bytes, interval: int | None) -> bytes:
    """An announce reply with its interval set to ``interval``; any other reply as it was."""
    if interval is None or len(reply) < 20 or int.from_bytes(reply[:4], "big") != 1:
        return reply
    return reply[:8] + interval.to_bytes(4, "big") + reply[12:]


def restate_http(reply: bytes, interval: int | None) -> bytes:
    """An HTTP reply with its bencoded intervals set to ``interval`` and its Content-Length made right."""
    head, sep, body = reply.partition(b"\r\n\r\n")
    if interval is None or not sep:
        return reply
    body = re.sub(rb"8:intervali\d+e", b"8:intervali%de" % interval, body)
    body = re.sub(rb"12:min intervali\d+e", b"12:min intervali%de" % interval, body)
    head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), head)
    return head + sep + body


class Later:
    """One thread sending replies held for a delay, in the order they fall due."""

    def __init__(self):
        self._heap: list = []
        self._cond = threading.Condition()
        self._n = 0
        threading.Thread(target=self._run, daemon=True).start()

    def call(self, delay: float, fn, *args) -> None:
        """Run ``fn(*args)`` ``delay`` seconds from now (at once when 0)."""
        if delay <= 0:
            fn(*args)
            return
        with self._cond:
            self._n += 1
            heapq.heappush(self._heap, (time.monotonic() + delay, self._n, fn, args))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, fn, args = heapq.heappop(self._heap)
            try:
                fn(*args)
            except OSError:
                pass


LATER = Later()


class UdpFace:
    """A UDP face: each datagram counted, then forwarded from a socket of its own per client."""

    def __init__(self, name: str, sock: socket.socket, target, delay: float, interval: int | None):
        self.name, self.sock, self.target, self.delay, self.interval = name, sock, target, delay, interval
        self._up: dict = {}
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            data, client = self.sock.recvfrom(65536)
            kind, hashes = udp_request(data)
            _count(self.name, "udp", kind)
            if kind == "scrape":
                _count(self.name, "udp", "scrape_hashes", len(hashes))
                _cost(self.name, hashes, 1.0 / max(len(hashes), 1))
            elif hashes:
                _cost(self.name, hashes, 1.0)
            if self.target is None:
                continue
            up = self._up.get(client)
            if up is None:
                up = self._up[client] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                up.connect(tuple(self.target))
                threading.Thread(target=self._replies, args=(up, client), daemon=True).start()
            try:
                up.send(data)
            except OSError:
                pass

    def _replies(self, up: socket.socket, client) -> None:
        while True:
            try:
                reply = up.recv(65536)
            except OSError:
                continue  # the tracker's port unreachable: nothing to pass on
            action = int.from_bytes(reply[:4], "big") if len(reply) >= 4 else -1
            _count(self.name, "udp", f"reply_{action}")
            LATER.call(self.delay, self.sock.sendto, restate_udp(reply, self.interval), client)


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def http_request(target: str) -> tuple[str, list[bytes]]:
    """The kind of an HTTP tracker request by its path (BEP 3, BEP 48) and the info-hashes it names."""
    path, _, query = target.partition("?")
    last = path.rsplit("/", 1)[-1]
    params = urllib.parse.parse_qs(query, keep_blank_values=True, encoding="latin-1")
    hashes = [h.encode("latin-1") for h in params.get("info_hash", [])]
    if last.startswith("scrape"):
        return "scrape", hashes
    if last.startswith("announce"):
        return ("withdrawal" if params.get("event") == ["stopped"] else "announce"), hashes
    return "other", hashes


class HttpFace(socketserver.BaseRequestHandler):
    """An HTTP face: each request counted, forwarded on a connection of its own, its reply held and restated."""

    name = ""
    target: tuple = ()
    delay = 0.0
    interval: int | None = None

    def handle(self) -> None:
        """Serve one connection's request (the crawler asks one per connection)."""
        request = _read_head(self.request)
        parts = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        kind, hashes = http_request(parts[1]) if len(parts) >= 2 else ("other", [])
        _count(self.name, "http", kind)
        if kind == "scrape":
            _count(self.name, "http", "scrape_hashes", len(hashes))
            _cost(self.name, hashes, 1.0 / max(len(hashes), 1))
        elif hashes:
            _cost(self.name, hashes, 1.0)
        try:
            with socket.create_connection(self.target, timeout=15) as up:
                up.sendall(request)
                reply = b""
                while chunk := up.recv(65536):
                    reply += chunk
        except OSError:
            _count(self.name, "http", "failed")
            return
        if self.delay:
            time.sleep(self.delay)
        try:
            self.request.sendall(restate_http(reply, self.interval))
        except OSError:
            _count(self.name, "http", "reply_lost")


class HttpServer(socketserver.ThreadingTCPServer):
    """A thread per connection; a backlog deep enough for a worker's bursts."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512


def bind_faces(host: str, udp: bool, http: bool, same_port: bool) -> tuple:
    """A UDP socket and a port for the TCP face on ``host``, the same number for both when ``same_port``."""
    for _ in range(100):
        u = None
        if udp:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind((host, 0))
        if not http:
            return u, None
        port = u.getsockname()[1] if (u is not None and same_port) else 0
        try:
            server = HttpServer((host, port), HttpFace, bind_and_activate=True)
        except OSError:
            u.close()
            continue
        return u, server
    raise RuntimeError(f"no port free for both faces on {host}")


def start(plan: dict) -> dict:
    """Start every tap of ``plan``; their ports by name."""
    interval = plan.get("interval")
    ports: dict[str, dict] = {}
    for tap in plan["taps"]:
        name = tap["name"]
        COUNTS[name] = {"udp": {}, "http": {}, "hashes": {}}
        u, server = bind_faces(tap["host"], tap["udp"] is not None, tap["http"] is not None, tap["same_port"])
        ports[name] = {}
        if u is not None:
            UdpFace(name, u, tap["udp"]["target"], tap["udp"].get("delay", 0.0), interval)
            ports[name]["udp"] = u.getsockname()[1]
        if server is not None:
            face = type(f"HttpFace_{name}", (HttpFace,), {
                "name": name, "target": tuple(tap["http"]["target"]), "delay": tap["http"].get("delay", 0.0),
                "interval": interval})
            server.RequestHandlerClass = face
            threading.Thread(target=server.serve_forever, daemon=True).start()
            ports[name]["http"] = server.server_address[1]
    return ports


class Control(BaseHTTPRequestHandler):
    """``GET /stats``: every count as JSON."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        """Answer the counts."""
        with LOCK:
            body = json.dumps(COUNTS).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        """Quiet: the bench's output is its JSON."""


def main() -> None:
    """Start the taps, print their ports, serve the counts until standard input closes."""
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    ports = start(plan)
    control = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    threading.Thread(target=control.serve_forever, daemon=True).start()
    print(json.dumps({"control": control.server_address[1], "taps": ports}), flush=True)
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    main()
