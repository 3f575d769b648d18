"""peercrawl on a real Redis Cluster (contract §9): any node's address serves every command.

The cluster (three masters, three replicas) is started per session by
``tests.redis_cluster``; each test keeps to its own namespace and names, as
``REDIS_URL``, a node that holds none of the namespace's keys, so every
command goes through the cluster client's redirections.
"""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest
import redis

from crawler.keys import Keys
from crawler.report.nodes import node_infos
from crawler.settings import Settings
from crawler.store import connect as store
from crawler.store import patience
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.stathat_sink import StatHatSink
from tests.test_worker_e2e import PLACES, ROOT, counter, pc, pcj

SECRET = "test-secret-0123456789"


def h(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


@pytest.fixture
def cluster_ns(redis_cluster):  # noqa: F811
    """A namespace on the cluster, and the URL of a node that holds none of its keys."""
    ns = "pccluster-" + uuid.uuid4().hex[:12]
    holders = redis_cluster.serving(Keys(ns).ready)
    # Neither the master of the namespace's slot nor its replica: a node that answers MOVED for every key.
    far = next(p for p in redis_cluster.live() if p not in holders)
    yield ns, redis_cluster.url(far)
    client = store.connect(Settings(redis_url=redis_cluster.url(far), secret=SECRET))
    keys = list(client.scan_iter(match=Keys(ns).match_all, count=1000))
    for k in keys:
        client.delete(k)
    client.close()


@pytest.fixture
def env(test_env, tmp_path, cluster_ns):
    ns, url = cluster_ns
    e = dict(test_env, REDIS_URL=url, PEERCRAWL_NAMESPACE=ns)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e["GEOIP_DB"] = str(write_city_db(tmp_path / "city.mmdb", PLACES))
    return e


def test_a_cluster_node_gets_the_cluster_client_and_a_single_redis_does_not(cluster_ns, redis_url):
    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    assert store.is_cluster(client)
    # The node named holds no key of the namespace: a plain client would be sent elsewhere.
    with pytest.raises(redis.exceptions.MovedError):
        redis.Redis.from_url(url).set(Keys(ns).announce_port, 1)
    assert not store.is_cluster(store.connect(Settings(redis_url=redis_url, secret=SECRET)))
    nodes = node_infos(client, "server")
    assert len(nodes) == 6 and all(":" in node for node, _ in nodes)


def test_every_command_works_through_a_node_that_owns_nothing(env, opentracker, tmp_path, redis_cluster):  # noqa: F811
    germany, japan = h("cluster-germany"), h("cluster-japan")
    ot = opentracker([germany, japan])
    ips = {germany: {peer_address(i) for i in range(6)}, japan: {peer_address(250 + i) for i in range(4)}}
    for ih, addresses in ips.items():
        for ip in addresses:
            ot.announce_from(ip, ih, 6881, left=1)
    with StatHatSink() as sink:
        env.update(PEERCRAWL_TRACKERS=ot.udp_url, STATHAT_EZKEY="test-ez-key", STATHAT_URL=sink.url,
                   PEERCRAWL_STATHAT_FAMILIES="countries,torrents")
        assert pcj(env, "add", germany, japan)["added"] == 2
        assert pcj(env, "status")["tracked"] == 2
        pc(env, "worker", "--until-idle", "--concurrency", "4", timeout=90)
        for ih, addresses in ips.items():
            t = pcj(env, "torrent", ih)
            assert (t["state"], t["visits"], t["peers_last_visit"]) == ("cooling", 1, len(addresses))
            assert len(t["history"]) == 1
        countries = counter(env, "countries")
        assert countries == {"countries.Germany.users": 6, "countries.Japan.users": 4}
        assert counter(env, "torrents") == {f"torrents.{germany}.users": 6, f"torrents.{japan}.users": 4}
        pc(env, "flush")
        posted = sink.counts()
        assert {m: posted[m] for m in countries} == countries
        status = pcj(env, "status")
        assert status["visits_last_hour"] == 2 and status["eviction_warning"] is None
        nodes = status["redis"]["nodes"]
        assert status["redis"]["cluster"] and status["redis"]["healthy"] and len(nodes) == 6
        # the namespace's keys are on one master and its replica, counted on each
        holders = {f"127.0.0.1:{p}" for p in redis_cluster.serving(Keys(env["PEERCRAWL_NAMESPACE"]).ready)}
        assert all(r["keys"] > 0 for r in nodes if r["node"] in holders)
        table = pc(env, "status").stdout
        assert "redis cluster: ok, 16384 of 16384 slots served" in table
        pc(env, "export", "--out", str(tmp_path / "export"))
        assert "countries.Germany.users,all" in (tmp_path / "export" / "countries.csv").read_text()


def test_the_dashboard_shows_every_cluster_node(cluster_ns, redis_cluster):  # noqa: F811
    from crawler.dashboard.views import Views

    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    settings = Settings(redis_url=url, namespace=ns, secret=SECRET)
    report = Views(client, Keys(ns), settings).operators()["status"]["redis"]
    assert (report["cluster"], report["healthy"], report["slots_ok"]) == (True, True, 16384)
    rows = report["nodes"]
    assert sorted(r["role"] for r in rows) == ["master"] * 3 + ["slave"] * 3
    assert sorted(r["node"] for r in rows) == sorted(f"127.0.0.1:{p}" for p in redis_cluster.ports)
    assert all(r["used_memory_bytes"] > 0 for r in rows)
    # the operators' page and /metrics read the same rows
    from prometheus_client.parser import text_string_to_metric_families

    from crawler.dashboard.app import create_app

    web = create_app(Views(client, Keys(ns), settings)).test_client()
    assert sorted(r["node"] for r in web.get("/api/operators").get_json()["redis"]) == sorted(r["node"] for r in rows)
    families = {f.name: f for f in text_string_to_metric_families(web.get("/metrics").get_data(as_text=True))}
    assert sorted(s.labels["node"] for s in families["peercrawl_redis_used_memory_bytes"].samples) == sorted(
        r["node"] for r in rows)


def test_status_shows_a_single_redis_as_one_node(test_env):
    status = pcj(dict(test_env, PYTHONPATH=ROOT), "status")
    (node,) = status["redis"]["nodes"]
    assert (status["redis"]["cluster"], status["redis"]["healthy"], node["node"], node["role"]) == (
        False, True, "redis", "master")
    assert node["used_memory_bytes"] > 0 and node["cpu_s"] > 0


def test_many_greenlets_wait_for_a_cluster_connection_instead_of_failing(cluster_ns):
    import gevent

    ns, url = cluster_ns
    client = store.connect(Settings(redis_url=url, secret=SECRET))
    key = Keys(ns).scratch("conns")

    def slow_call():
        # A Lua busy-wait holds its connection ~2 ms: 300 sent at once need more connections than a
        # pool gives. Short, so the node answers its cluster bus within the fixture's 2 s node timeout
        # (300 x 20 ms kept it from it long enough for a failover, which dropped acknowledged writes).
        client.eval("local t = redis.call('TIME'); local e = t[1] * 1000000 + t[2] + 2000; "
                    "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= e; "
                    "return redis.call('INCR', KEYS[1])", 1, key)

    jobs = [gevent.spawn(slow_call) for _ in range(300)]
    gevent.joinall(jobs, timeout=60)
    assert all(j.ready() for j in jobs) and [j.exception for j in jobs if j.exception] == []
    assert int(client.get(key)) == 300
    assert patience.outage(client).outages == 0  # waited for a connection, not taken for a Redis gone away
    client.close()
