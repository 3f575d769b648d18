"""A Redis that goes away (contract §9): calls wait and go on, one warning and one recovery line per outage,
nothing counted twice after a lost reply, and WAIT for replicas.

The failover tests kill the master serving a test namespace on the session's
cluster (``tests.redis_cluster``) and restore it afterwards (the killed node
restarted, rejoining as a replica, and the cluster healthy and replicated
again), since the cluster is shared by the whole session.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import gevent
import gevent.event
import pytest
import redis
from gevent import socket
from gevent.server import StreamServer
from structlog.testing import capture_logs

from crawler.counters import Recorder, top
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome
from crawler.settings import Settings
from crawler.store import connect as store
from crawler.store import scripts
from crawler.store.outage import Outage
from crawler.torrents.items import NewItem
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.test_cluster import SECRET, cluster_ns, env  # noqa: F401 (fixtures)
from tests.test_connect import private_redis  # noqa: F401 (fixture)
from tests.test_worker_e2e import PEERCRAWL, counter, h, pc, pcj

# Log lines that would mean an outage was logged per failed call.
PER_CALL = {"claim_failed", "heartbeat_failed", "visit_store_error", "service_failed", "visit_crashed"}


@pytest.fixture
def restore(redis_cluster):  # noqa: F811
    """Ports a test killed: restarted afterwards, and the cluster healthy with a replica per master."""
    killed: list[int] = []
    yield killed
    for port in killed:
        redis_cluster.restart(port)
    redis_cluster.wait_healthy(replicated=True)


def events(stderr: str) -> list[str]:
    return [json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")]


# --- the Outage alone ----------------------------------------------------------

def test_an_outage_is_one_warning_and_one_recovery_however_many_calls_fail():
    o = Outage("redis://x", patience=5.0)
    with capture_logs() as logs:
        for _ in range(3):
            assert o.failed(redis.ConnectionError("refused"), "claim")
        assert not o.failed(redis.ResponseError("WRONGTYPE"), "claim")  # not an outage: the caller says it
        assert o.down and o.figures()["redis_outages"] == 1
        o.ok()
        o.ok()
    assert [(e["event"], e["log_level"]) for e in logs] == [("redis_unavailable", "warning"), ("redis_back", "info")]
    assert logs[0]["what"] == "claim" and logs[1]["failed_attempts"] == 3 and not o.down


def test_a_call_still_waiting_keeps_the_outage_open():
    """On a cluster one master's slots fail while the others answer: those answers do not end it."""
    o = Outage(patience=10.0, sleep=gevent.sleep)
    back = gevent.event.Event()

    def flaky():
        if not back.is_set():
            raise redis.ConnectionError("refused")
        return "done"

    with capture_logs() as logs:
        waiting = gevent.spawn(o.run, flaky, "record")
        gevent.sleep(0.2)
        o.ok()  # another slot answered
        assert o.down
        back.set()
        assert waiting.get(timeout=5) == "done"
    assert [e["event"] for e in logs] == ["redis_unavailable", "redis_back"]
    assert logs[1]["waited"] == 1 and logs[1]["gave_up"] == 0


def test_a_call_gives_up_after_the_patience_with_one_line(private_redis, settings):  # noqa: F811
    url, server = private_redis
    client = store.connect(settings.replace(redis_url=url, redis_wait_seconds=1.0))
    queue = Queue(client, Keys("gone-" + uuid.uuid4().hex[:8]), settings)
    server.shutdown(nosave=True)
    start = time.monotonic()
    with capture_logs() as logs, pytest.raises(StoreError) as e:
        queue.add([NewItem(h("never"))])
    assert 0.3 < time.monotonic() - start < 5  # it waited, about the patience, then gave up
    assert "did not come back within 1 s" in str(e.value) and "\n" not in str(e.value)
    assert [x["event"] for x in logs] == ["redis_unavailable"]


# --- a lost reply, sent again -----------------------------------------------------

class ReplyCutter:
    """A TCP forwarder to Redis that, once ``cut()`` was called, drops the reply to the next
    EVALSHA and closes that connection: Redis ran the script, the client never hears of it."""

    def __init__(self, redis_url: str):
        self._target = ("127.0.0.1", int(redis_url.rsplit(":", 1)[1].split("/")[0]))
        self._armed = False
        self.cuts = 0
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        self.url = f"redis://127.0.0.1:{self.server.server_port}/0"

    def cut(self) -> None:
        self._armed = True

    def _handle(self, client, _addr):
        upstream = socket.create_connection(self._target)
        doomed = gevent.event.Event()

        def requests():
            while data := client.recv(65536):
                if self._armed and b"EVALSHA" in data:
                    self._armed = False
                    doomed.set()
                upstream.sendall(data)

        def replies():
            while data := upstream.recv(65536):
                if doomed.is_set():
                    self.cuts += 1
                    return  # the reply is lost with the connection
                client.sendall(data)

        pumps = [gevent.spawn(requests), gevent.spawn(replies)]
        try:
            gevent.wait(pumps, count=1)
        finally:
            gevent.killall(pumps)
            client.close()
            upstream.close()


@pytest.fixture
def cutter(redis_url):
    c = ReplyCutter(redis_url)
    yield c
    c.server.stop()


def test_a_recording_whose_reply_was_lost_is_sent_again_and_counts_nothing_twice(cutter, settings, keys):
    client = store.connect(settings.replace(redis_url=cutter.url))
    recorder = Recorder(client, keys, settings)
    ips = [peer_address(i) for i in range(5)]
    with capture_logs() as logs:
        cutter.cut()
        recorder.record_visit(h("lost-reply"), ips, time.time())
    assert cutter.cuts == 1
    assert [e["event"] for e in logs] == ["redis_unavailable", "redis_back"]
    assert {r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=10)} == {
        f"torrents.{h('lost-reply')}.users": 5}


def test_a_completion_whose_reply_was_lost_is_applied_once(cutter, settings, keys):
    client = store.connect(settings.replace(redis_url=cutter.url))
    queue = Queue(client, keys, settings)
    queue.add([NewItem(h("lost-completion"))])
    (lease,) = queue.claim(1)
    cutter.cut()
    state, _ = queue.complete(lease, Outcome.SOME, peers=3)
    assert cutter.cuts == 1
    assert state == "stale"  # the resend found the lease already completed: nothing done twice
    assert sum(int(v) for v in client.hvals(keys.visits)) == 1
    assert client.zscore(keys.cooling, h("lost-completion")) is not None


# --- failover on the cluster ----------------------------------------------------------

def test_a_worker_rides_out_a_master_failover_and_logs_it_once(env, opentracker, redis_cluster, restore):  # noqa: F811
    hashes = [h(f"failover{i}") for i in range(12)]
    ot = opentracker(hashes)
    truth: dict[str, set] = {}
    for i, ih in enumerate(hashes):  # overlapping swarms: the same IPs seen through several torrents
        truth[ih] = {peer_address(j) for j in range(2 * i, 2 * i + 5)}
        for ip in truth[ih]:
            ot.announce_from(ip, ih, 6881, left=1)
    # Revisited at once and never evicted: the worker is busy with Redis when the master dies.
    env.update(PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_DHT="off", PEERCRAWL_REVISIT_SECONDS="0",
               PEERCRAWL_MULTIPLIER_SOME="0.999", PEERCRAWL_LOG_FORMAT="json")
    assert pcj(env, "add", *hashes)["added"] == len(hashes)
    w = subprocess.Popen(PEERCRAWL + ["worker", "--concurrency", "4", "--duration", "40"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 20
        while pcj(env, "status")["visits_last_hour"] < 20 and time.monotonic() < end:
            time.sleep(0.2)
        master = redis_cluster.owner(Keys(env["PEERCRAWL_NAMESPACE"]).ready)
        restore.append(master)
        redis_cluster.kill(master)  # the worker is visiting: its next calls find the slot without a master
        redis_cluster.wait_healthy()  # the replica took over
        before = pcj(env, "status")["visits_last_hour"]
        end = time.monotonic() + 20
        while pcj(env, "status")["visits_last_hour"] < before + 20 and time.monotonic() < end:
            time.sleep(0.2)
        went_on = pcj(env, "status")["visits_last_hour"] >= before + 20
        # A call that met the failover may still sleep its backoff while others go on: the outage ends
        # (redis_back) once it too is answered, which the worker's next heartbeats show.
        end = time.monotonic() + 20
        while any(wk.get("redis_down_s") is not None for wk in pcj(env, "status")["workers"]) \
                and time.monotonic() < end:
            time.sleep(0.5)
    finally:
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=60)
    assert went_on, f"the worker did not go on after the failover: {err[-3000:]}"
    assert w.returncode == 0, err[-2000:]
    seen = events(err)
    assert seen.count("redis_unavailable") == 1 and seen.count("redis_back") == 1, err[-3000:]
    assert not PER_CALL & set(seen), err[-3000:]
    # Nothing counted twice: every IP once per torrent, once overall.
    assert counter(env, "torrents") == {f"torrents.{ih}.users": len(ips) for ih, ips in truth.items()}
    assert counter(env, "countries") == {"countries.Germany.users": len(set().union(*truth.values()))}


def test_a_command_run_during_a_failover_waits_and_succeeds(env, redis_cluster, restore):  # noqa: F811
    assert pcj(env, "add", h("before"))["added"] == 1
    master = redis_cluster.owner(Keys(env["PEERCRAWL_NAMESPACE"]).ready)
    restore.append(master)
    redis_cluster.kill(master)
    start = time.monotonic()
    logged = dict(env, PEERCRAWL_LOG_FORMAT="json")
    r = pc(logged, "status", "--json")  # the slot has no master yet
    assert json.loads(r.stdout)["tracked"] == 1
    assert events(r.stderr).count("redis_unavailable") == 1 and events(r.stderr).count("redis_back") == 1
    r = pc(logged, "add", h("during"), "--json")
    assert json.loads(r.stdout)["added"] == 1
    assert time.monotonic() - start < 30
    assert pcj(env, "torrent", h("during"))["state"] == "ready"  # admitted, due at once


# --- WAIT ----------------------------------------------------------------------------------

SET = "redis.call('SET', KEYS[1], ARGV[1]) return 1"


def _replica(redis_cluster, port: int) -> redis.Redis:  # noqa: F811
    """A connection to a replica that may read (READONLY), on one connection."""
    r = redis.Redis(port=port, socket_timeout=5, single_connection_client=True)
    r.execute_command("READONLY")
    return r


def test_with_wait_a_recording_returns_once_a_replica_has_it(cluster_ns, redis_cluster):  # noqa: F811
    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    keys = Keys(ns)
    wait = scripts.Wait.from_settings(Settings(wait_replicas=1, wait_timeout_ms=5000))
    script = client.register_script(SET)
    master, replica = redis_cluster.serving(keys.ready)[:2]
    reader = _replica(redis_cluster, replica)
    for i in range(20):
        key = f"{{{ns}}}:wait-test:{i}"
        assert scripts.run_pipelined(client, [(script, [key], [str(i)])], wait=wait) == [1]
        assert reader.get(key) == str(i).encode()  # on the replica the moment the call returned
        client.delete(key)
    assert (wait.batches, wait.short) == (20, 0)
    assert scripts.Wait.from_settings(Settings()) is None  # 0 replicas: off


def test_with_wait_the_flusher_posts_only_what_a_replica_holds_as_claimed(cluster_ns, redis_cluster, tmp_path):  # noqa: F811
    import geo
    from crawler.stathat.flusher import Flusher
    from tests.mmdb import write_city_db
    from tests.stathat_sink import StatHatSink

    ns, url = cluster_ns
    with StatHatSink() as sink:
        s = Settings(redis_url=url, namespace=ns, secret=SECRET, wait_replicas=1, wait_timeout_ms=5000,
                     stathat_ezkey="k", stathat_url=sink.url, stathat_families=("countries", "torrents"))
        client = store.connect(s)
        keys = Keys(ns)
        rec = Recorder(client, keys, s, geo.open_locator(write_city_db(tmp_path / "city.mmdb")))
        rec.record_visit(h("wait-flush"), [peer_address(i) for i in range(30)], time.time())
        reader = _replica(redis_cluster, redis_cluster.serving(keys.outbox_in_flight)[1])
        seen = []
        # at each post, the replica already holds the claimed batch (a failover now keeps the claim)
        sink.on_post = lambda body: seen.append(reader.hlen(keys.outbox_in_flight))
        flusher = Flusher(client, keys, s)
        result = flusher.flush_once()
        assert result["ok"] and result["increments"] > 0 and seen and all(n > 0 for n in seen)
        assert flusher.wait.batches >= 2 and flusher.wait.short == 0  # the claim and the ack were waited for
        # and the ack reached it before flush_once returned
        assert reader.exists(keys.outbox_in_flight) == 0 and reader.hlen(keys.outbox) == 0
        client.close()


def test_without_a_replica_wait_times_out_and_the_recording_stands(cluster_ns, redis_cluster, restore):  # noqa: F811
    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    key = f"{{{ns}}}:wait-alone"
    master, replica = redis_cluster.serving(key)[:2]
    restore.append(replica)
    redis_cluster.kill(replica)
    wait = scripts.Wait(1, 200)
    script = client.register_script(SET)
    with capture_logs() as logs:
        start = time.monotonic()
        assert scripts.run_pipelined(client, [(script, [key], ["kept"])], wait=wait) == [1]
        assert time.monotonic() - start >= 0.19
    assert (wait.batches, wait.short) == (1, 1)
    assert [e["event"] for e in logs] == ["replicas_behind"]
    assert client.get(key) == b"kept"
    client.delete(key)


def test_the_cluster_clients_pipelines_behave_as_redis_pys(cluster_ns):  # noqa: F811
    """Queued, reused after execute, in a MULTI, and in immediate mode after WATCH."""
    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    key = f"{{{ns}}}:pipe"
    p = client.pipeline(transaction=False)
    assert p.hset(key, "a", 1) is p and len(p) == 1
    assert p.execute() == [1]
    p.hget(key, "a").hlen(key)
    assert p.execute() == [b"1", 1]
    with client.pipeline(transaction=True) as t:
        t.hincrby(key, "a", 2)
        t.expire(key, 60)
        assert t.execute() == [3, True]
    with client.pipeline(transaction=True) as w:  # redis-py's cluster pipeline WATCHes only in a transaction
        w.watch(key)
        assert w.hget(key, "a") == b"3"  # immediate, as redis-py's
        w.multi()
        w.delete(key)
        assert w.execute() == [1]
    assert client.exists(key) == 0
