"""The worker's Redis client: many greenlets never fail for want of a connection.

redis-py 8's default pool raises MaxConnectionsError past 100 connections in
use; a worker pool of 128 greenlets hit it and its visits failed. The check
runs in a gevent-patched subprocess, as the worker command runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from workers.connections import EXTRA_CONNECTIONS, worker_client

ROOT = Path(__file__).resolve().parent.parent

# 130 greenlets each hold a connection for 0.5 s (a BLPOP that times out).
SCRIPT = """
from gevent import monkey; monkey.patch_all()
import json, sys
import gevent, redis
sys.path.insert(0, sys.argv[1])
from workers.connections import worker_client
plain = redis.Redis.from_url(sys.argv[2])
client = worker_client(plain, 120) if sys.argv[3] == "worker" else plain
errors = []
def hold(i):
    try:
        client.blpop(sys.argv[4], timeout=0.5)  # an empty key: waits, holding its connection
    except redis.RedisError as e:
        errors.append(type(e).__name__)
gevent.joinall([gevent.spawn(hold, i) for i in range(130)])
print(json.dumps({"errors": len(errors), "kinds": sorted(set(errors))}))
"""


def run(redis_url: str, which: str, keys) -> dict:
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT), redis_url, which, keys.scratch("nothing")],
                       capture_output=True, text=True, timeout=60, check=True)
    return json.loads(r.stdout)


def test_many_greenlets_wait_for_a_connection_instead_of_failing(redis_url, keys):
    assert run(redis_url, "plain", keys)["kinds"] == ["MaxConnectionsError"]  # the bug
    assert run(redis_url, "worker", keys) == {"errors": 0, "kinds": []}


def test_worker_client_talks_to_the_same_server_with_a_bounded_blocking_pool(client, keys, redis_url):
    wc = worker_client(client, 40)
    pool = wc.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert pool.connection_class.__name__ == "Checked" + client.connection_pool.connection_class.__name__
    assert pool.max_connections == 40 + EXTRA_CONNECTIONS
    client.set(keys.scratch("probe"), b"x")
    assert wc.get(keys.scratch("probe")) == b"x"
    # A client whose pool the caller chose is used as it is.
    custom = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(redis_url))
    assert worker_client(custom, 40) is custom


# A greenlet killed while BLPOP waits would leave that command's reply (nil,
# at 0.4 s) unread on its connection. redis-py drops a connection whose read
# was interrupted; the worker pool, which skips the per-command probe after
# clean releases, must keep that guarantee: the next commands get their own replies.
KILLED = """
from gevent import monkey; monkey.patch_all()
import sys
import gevent, redis
sys.path.insert(0, sys.argv[1])
from crawler.store import connect as store
from crawler.settings import Settings
from workers.connections import worker_client
if sys.argv[5] == "cluster":  # every node's pool is a CheckedPool already
    client = store.connect(Settings(redis_url=sys.argv[2]))
    assert type(client.get_default_node().redis_connection.connection_pool).__name__ == "CheckedPool"
else:
    client = worker_client(redis.Redis.from_url(sys.argv[2]), 1)
key, empty = sys.argv[3], sys.argv[4]
client.set(key, b"right")
g = gevent.spawn(client.blpop, empty, timeout=0.4)
gevent.sleep(0.1)
g.kill()
gevent.sleep(0.6)  # the BLPOP's nil reply has arrived on that connection
print([client.get(key) for _ in range(3)])
"""


@pytest.mark.parametrize("server", ["single", "cluster"])
def test_a_command_killed_mid_reply_does_not_leak_its_reply_to_the_next(server, redis_url, keys, request):
    url = redis_url
    if server == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        url = cluster.url(cluster.live()[0])
    r = subprocess.run([sys.executable, "-c", KILLED, str(ROOT), url, keys.scratch("value"),
                        keys.scratch("value", "empty"), server],
                       capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == "[b'right', b'right', b'right']", r.stderr[-2000:]
