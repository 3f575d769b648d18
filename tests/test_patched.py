"""The suite runs as the worker command does: under gevent's monkey patching (tests/gevent_patch.py).

Without it the in-process tests would exercise real threads and blocking
sockets, which the worker never uses; these tests fail if the patch is lost.
"""

from __future__ import annotations

import json
import os
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
    # crawler.cli.main calls monkey.patch_all() with its defaults (crawler.cli.patching); a fresh
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


PLUGIN = '''
import os
def will_patch_all(event):
    with open(os.environ["PLUGIN_SAW"], "a") as f:
        f.write("will_patch_all\\n")
def did_patch_module(event):
    with open(os.environ["PLUGIN_SAW"], "a") as f:
        f.write(event.module_name + "\\n")
'''

ENTRY_POINTS = """[gevent.plugins.monkey.will_patch_all]
saw = peercrawl_test_plugin:will_patch_all

[gevent.plugins.monkey.did_patch_module]
saw = peercrawl_test_plugin:did_patch_module
"""


def test_the_patch_reads_the_plugins_once_and_still_calls_every_installed_one(tmp_path):
    # A distribution installed on the path with gevent's plugin entry points, as a real plugin is.
    (tmp_path / "peercrawl_test_plugin.py").write_text(PLUGIN)
    info = tmp_path / "peercrawl_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: peercrawl-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    saw = tmp_path / "saw.txt"
    code = ("import json, importlib.metadata as m\n"
            "lookup = m.entry_points\n"
            "calls = []\n"
            "def counted(**kw):\n"
            "    calls.append(kw)\n"
            "    return lookup(**kw)\n"
            "m.entry_points = counted\n"
            "from crawler.cli.patching import patch\n"
            "patch()\n"
            "from gevent import monkey\n"
            "print(json.dumps({'reads': len(calls), 'restored': m.entry_points is counted,"
            " 'socket': monkey.is_module_patched('socket')}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]), "PLUGIN_SAW": str(saw)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                         check=True)
    got = json.loads(out.stdout)
    # one reading of every distribution's entry points, where gevent makes one per notice
    assert got == {"reads": 1, "restored": True, "socket": True}
    lines = saw.read_text().splitlines()
    assert lines[0] == "will_patch_all"
    assert {"socket", "ssl", "threading", "time"} <= set(lines[1:])
