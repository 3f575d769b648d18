"""A real local HTTP server standing in for StatHat's EZ API.

``StatHatSink`` listens on 127.0.0.1 (port chosen by the OS) in a thread,
answers like StatHat (``{"status": 200, "msg": "ok"}``), and records every
posted JSON body. ``fail_next(n)`` makes the next n posts answer HTTP 500
(nothing recorded as delivered); ``fail_next(n, after_accept=True)`` records
them as delivered but still answers 500 (a post whose result the client cannot
know). ``delay``: seconds each post takes before it is answered (a slow
StatHat; the post is recorded when answered). Usable as a context manager or a pytest fixture; the worker tests reuse
it. Each request has a thread of its own, a greenlet when the suite runs
patched (tests/gevent_patch.py); ``most_at_once`` is the most requests it
held at one time, which shows whether posts really overlapped.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StatHatSink:
    """StatHat's EZ API on loopback, recording what it accepts (see the module note)."""
    def __init__(self, host: str = "127.0.0.1", delay: float = 0.0):
        self.delay = delay
        self.on_post = None  # called with each POST's body before it is answered
        self.posts: list[dict] = []  # accepted bodies
        self.requests = 0  # every POST, accepted or failed
        self.most_at_once = 0
        self._at_once = 0
        self._fail = 0
        self._fail_after_accept = False
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if sink.on_post is not None:
                    sink.on_post(json.loads(raw))
                with sink._lock:
                    sink._at_once += 1
                    sink.most_at_once = max(sink.most_at_once, sink._at_once)
                if sink.delay:
                    time.sleep(sink.delay)
                with sink._lock:
                    sink._at_once -= 1
                    sink.requests += 1
                    failing = sink._fail > 0
                    if failing:
                        sink._fail -= 1
                    if not failing or sink._fail_after_accept:
                        sink.posts.append(json.loads(raw))
                code, body = (500, {"status": 500, "msg": "failing on purpose"}) if failing else (
                    200, {"status": 200, "msg": "ok"})
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # listen backlog: a worker posts from many greenlets at once (default 5)

        self.server = Server((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/ez"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def fail_next(self, n: int, after_accept: bool = False) -> None:
        """Answer HTTP 500 to the next ``n`` posts."""
        with self._lock:
            self._fail, self._fail_after_accept = n, after_accept

    def counts(self) -> Counter:
        """Summed ``count`` per stat over every accepted post."""
        total: Counter = Counter()
        with self._lock:
            for body in self.posts:
                for d in body["data"]:
                    if "count" in d:
                        total[d["stat"]] += d["count"]
        return total

    def values(self, stat: str) -> list:
        """Every ``value`` posted for ``stat``, in order."""
        with self._lock:
            return [d["value"] for b in self.posts for d in b["data"] if d["stat"] == stat and "value" in d]

    def ezkeys(self) -> set:
        with self._lock:
            return {b.get("ezkey") for b in self.posts}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def __enter__(self) -> "StatHatSink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StatHatSinkProcess:
    """A ``StatHatSink`` in a process of its own, for benchmarks: what it does and keeps is
    not the measured process's CPU or memory. ``close`` stops it (its stdin closed) and
    returns the increments it accepted."""

    def __init__(self):
        import subprocess
        import sys
        from pathlib import Path

        root = str(Path(__file__).resolve().parent.parent)
        code = ("import sys; sys.path.insert(0, sys.argv[1]);"
                "from tests.stathat_sink import StatHatSink; s = StatHatSink(); print(s.url, flush=True);"
                "sys.stdin.read(); print(sum(s.counts().values()), flush=True)")
        self.proc = subprocess.Popen([sys.executable, "-c", code, root], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()

    def close(self) -> int:
        """Stop the sink; the increments it accepted (-1 if it ended without saying)."""
        self.proc.stdin.close()
        try:
            got = int(self.proc.stdout.readline() or -1)
            self.proc.wait(10)
        except Exception:  # noqa: BLE001 - a sink that will not stop is killed
            self.proc.kill()
            got = -1
        return got
