"""The suite runs as the worker command does: under gevent's monkey patching (tests/gevent_patch.py).

Without it the in-process tests would exercise real threads and blocking
sockets, which the worker never uses; these tests fail if the patch is lost.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

import gevent
import gevent.socket
from gevent import monkey

from tests.stathat_sink import StatHatSink


def _patched() -> list[str]:
    return sorted(name for name in monkey.saved if not name.startswith("_gevent"))


def test_the_suite_patches_what_the_worker_command_patches():
    # crawler.cli.main calls monkey.patch_all() with its defaults; a fresh
    # interpreter doing the same shows which modules that covers.
    fresh = subprocess.run(
        [sys.executable, "-c", "import json; from gevent import monkey; monkey.patch_all(); "
         "print(json.dumps(sorted(n for n in monkey.saved if not n.startswith('_gevent'))))"],
        capture_output=True, text=True, timeout=60, check=True)
    assert _patched() == json.loads(fresh.stdout)
    for module in ("socket", "ssl", "select", "threading", "time", "subprocess"):
        assert monkey.is_module_patched(module), module
    assert socket.socket is gevent.socket.socket
    assert time.sleep is gevent.sleep
    assert ssl.SSLContext.__module__ == "gevent.ssl"


def test_threads_are_greenlets():
    seen = []
    t = threading.Thread(target=lambda: seen.append(gevent.getcurrent()))
    t.start()
    t.join()
    assert isinstance(seen[0], gevent.Greenlet)


def test_redis_py_connects_through_a_gevent_socket(client):
    client.ping()
    connection = client.connection_pool.get_connection()
    try:
        assert isinstance(connection._sock, gevent.socket.socket)
    finally:
        client.connection_pool.release(connection)


def test_a_stand_in_built_on_threads_still_serves_requests_at_once():
    # StatHatSink is a ThreadingHTTPServer: patched, its threads are greenlets
    # on the test's own hub, and slow posts must still overlap.
    with StatHatSink(delay=1.0) as sink:
        body = json.dumps({"ezkey": "k", "data": [{"stat": "s", "count": 1}]}).encode()
        posts = [gevent.spawn(urllib.request.urlopen, sink.url, body, 30) for _ in range(4)]
        gevent.joinall(posts, raise_error=True)
        assert all(p.value.status == 200 for p in posts)
        assert sink.requests == 4 and sink.most_at_once >= 2
