"""No log line or traceback holds a secret or a peer's address, in any log format (crawler/logs.py).

A crash is rendered with the fingerprint key, the dashboard token, the
Redis URL with its password and a peer's address in the crashing frames'
local variables: in process for every format ``logs.configure`` offers, and
through the real ``peercrawl worker`` whose visit crashes (the crash put in
the visit's scoring step by a wrapper around the real command).
"""

from __future__ import annotations

import io
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawler import logs
from crawler.bencode import codec as bencode
from crawler.settings import Settings
from tests import redis_servers
from tests.cli import run

SECRET = "fingerprint-key-7b1e9f2c4d"
TOKEN = "dashboard-token-5a8c3e0f71"
REDIS_PASSWORD = "redis-pw-93d0c6a2"
PEER = ("6.6.0.19", 6881)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _crash(redis_url: str) -> None:
    settings = Settings(secret=SECRET, dashboard_token=TOKEN, redis_url=redis_url)  # noqa: F841 - a crash's locals
    secret, dashboard_token = settings.secret, settings.dashboard_token  # noqa: F841
    peers = [PEER]  # noqa: F841
    peer_ip = PEER[0]  # noqa: F841
    raise RuntimeError("a bug in scoring")


def _leaks(text: str) -> list[str]:
    text = ANSI.sub("", text)
    return [s for s in (SECRET, TOKEN, REDIS_PASSWORD, PEER[0]) if s in text]


@pytest.mark.parametrize("fmt, stream", [("json", io.StringIO), ("console", io.StringIO), ("auto", _Terminal),
                                         ("auto", io.StringIO)], ids=["json", "console", "auto-terminal", "auto-pipe"])
def test_a_crash_in_every_log_format_shows_no_local_and_no_secret(fmt, stream):
    out = stream()
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0"
    logs.configure("info", fmt, stream=out, hidden=[SECRET, TOKEN, REDIS_PASSWORD])
    try:
        try:
            _crash(url)
        except RuntimeError:
            logs.get("worker").exception("visit_crashed", info_hash="ab" * 20)
        # a secret in the message or the fields is replaced; a peer given as a field is the caller's to avoid
        logs.get("worker").warning("redis_unavailable", error=f"AUTH {REDIS_PASSWORD} refused",
                                   token=TOKEN, nested={"k": [SECRET]})
    finally:
        logs.configure("info", "json")
    text = out.getvalue()
    assert "visit_crashed" in text and "RuntimeError: a bug in scoring" in text and "_crash" in text, text
    assert _leaks(text) == [], text
    assert text.count(logs.HIDDEN) >= 3, text
    if fmt == "json" or stream is io.StringIO and fmt == "auto":
        lines = [json.loads(line) for line in text.splitlines()]
        assert "Traceback" in lines[0]["exception"]


def test_a_secret_with_quotes_is_hidden_in_json_and_console_alike():
    odd = 'key"with\\quotes-0123456789'
    for fmt in ("json", "console"):
        out = io.StringIO()
        logs.configure("info", fmt, stream=out, hidden=[odd])
        try:
            logs.get().warning("odd", value=odd, as_repr=[odd])
        finally:
            logs.configure("info", "json")
        text = out.getvalue()
        assert "with" not in text and logs.HIDDEN in text, (fmt, text)


# The real command with one fault: the visit's scoring step raises, with the
# crawl's secrets and the visit's peers in its locals (and the peers in the
# caller's: the real Visitor.visit_then_claim frame holds ``ips``).
CRASHING_WORKER = r"""
import sys

from gevent import monkey

monkey.patch_all()
import workers.visit
from crawler.settings import Settings


def outcome(*args, **kwargs):
    settings = Settings.from_env()
    secret, dashboard_token, redis_url = settings.secret, settings.dashboard_token, settings.redis_url
    peer = ("6.6.0.19", 6881)
    raise RuntimeError(f"a bug in scoring near {redis_url}")


workers.visit.outcome = outcome
from crawler.cli import main

main(sys.argv[1:])
"""


@pytest.fixture
def tracker():
    """An HTTP tracker on loopback that lists one peer, ``PEER``, for every announce."""
    body = bencode.encode({b"interval": 1800, b"complete": 1, b"incomplete": 0,
                           b"peers": bytes(map(int, PEER[0].split("."))) + PEER[1].to_bytes(2, "big")})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/announce"
    server.shutdown()
    server.server_close()


@pytest.mark.interpreted
@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_crashing_visit_of_the_real_worker_logs_no_secret_and_no_peer(test_env, tmp_path, tracker, fmt):
    srv = redis_servers.start(tmp_path / "redis", "redis", REDIS_PASSWORD)
    try:
        env = dict(test_env, REDIS_URL=srv.url, PEERCRAWL_SECRET=SECRET, PEERCRAWL_DASHBOARD_TOKEN=TOKEN,
                   PEERCRAWL_LOG_FORMAT=fmt, PEERCRAWL_TRACKERS=tracker)
        assert run(env, "add", "c" * 40).returncode == 0
        import subprocess

        p = subprocess.run([sys.executable, "-c", CRASHING_WORKER, "worker", "--duration", "4"], env=env,
                           capture_output=True, text=True, timeout=60)
    finally:
        srv.stop()
    err = ANSI.sub("", p.stderr)
    assert p.returncode == 0, err[-3000:]
    assert "visit_crashed" in err and "RuntimeError: a bug in scoring near redis://" in err, err[-3000:]
    assert "Traceback" in err and "in outcome" in err, err[-3000:]
    assert _leaks(p.stderr + p.stdout) == [], err[-3000:]


def test_an_exception_no_one_caught_is_printed_without_the_hidden_texts():
    import subprocess

    code = ("from crawler import logs\n"
            f"logs.configure('info', 'console', hidden=[{TOKEN!r}])\n"
            f"def serve(token={TOKEN!r}):\n"
            "    raise RuntimeError(f'refused {token}')\n"
            "serve()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "RuntimeError: refused <hidden>" in p.stderr and "in serve" in p.stderr, p.stderr
    assert TOKEN not in p.stderr
