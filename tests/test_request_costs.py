"""What a visit costs the sources: requests counted where they are sent, written per minute, shown.

A crawl against a real opentracker is counted exactly as opentracker counts
what it received, and ``status --json`` says so; DHT lookups count once per
traversal; a minute's hash stays bounded with more trackers than its bound;
a killed worker loses only what it had not written; a batch sent again after
a lost reply adds nothing twice (the real Redis, behind a forwarder that
loses replies); the operators page (in chromium) and the dashboard's
``/metrics`` show what ``status --json`` says; a Redis Cluster takes it all.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import gevent
import pytest
import redis
from gevent import socket
from gevent.server import StreamServer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler.dashboard.collector import registry_for
from crawler.dashboard.views import Views
from crawler.errors import StoreError
from crawler.queue.queue import Queue
from crawler.report.queue_report import queue_report
from crawler.source_settings import TrackerSpec
from crawler.sources.request_counts import KINDS, MINUTE_FIELDS, RequestCounts
from crawler.store import scripts
from crawler.store.minute_figures import each_minute
from crawler.torrents.items import NewItem
from tests.cli import run, run_json
from tests.holding_proxy import command_end
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.test_cluster import cluster_ns  # noqa: F401 (fixture)
from tests.test_dashboard_browser import browser, dashboard  # noqa: F401 (fixtures)
from workers.process import Process

ROOT = str(Path(__file__).resolve().parent.parent)


def hashes(tag: str, n: int) -> list[str]:
    return [hashlib.sha1(f"{tag}-{i}".encode()).hexdigest() for i in range(n)]


def received(ot) -> dict[tuple[str, str], int]:
    """What opentracker says it received: (``udp`` | ``tcp``, connect | announce | scrape) -> count."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ot.port}/stats?mode=everything", timeout=5) as r:
        page = r.read().decode()
    out = {}
    for proto in ("udp", "tcp"):
        block = re.search(rf"<{proto}>(.*?)</{proto}>", page, re.S).group(1)
        out.update({(proto, k): int(v) for k, v in re.findall(r"<(\w+)>(\d+)</\1>", block)})
    return out


def fresh_minute() -> None:
    """Wait for the next minute when this one is nearly over: one test's counts land in one minute."""
    left = 60 - time.time() % 60
    if left < 10:
        time.sleep(left + 0.1)


def minute_hash(client, keys) -> dict[str, int]:
    """Every field of this minute's request counts."""
    m = int(time.time()) // 60
    return each_minute(client, keys.request_minute, range(m, m + 1), "the test's counts")[0]


def test_a_crawl_costs_what_opentracker_received(settings, client, keys, opentracker, tmp_path, test_env):  # noqa: F811
    full, empty = hashes("full", 6), hashes("empty", 6)
    # two trackers, one asked over UDP and one over HTTP (one host, port and path would be one tracker, asked once)
    ou, oh = opentracker(full + empty), opentracker(full + empty)
    for i, h in enumerate(full):
        for j in range(3):
            for ot in (ou, oh):
                ot.announce_from(peer_address(3 * i + j), h, 6881)
    # both list the same peers: mirrors off, so every live swarm is announced to at both
    s = settings.replace(trackers=(TrackerSpec(ou.udp_url, 200), TrackerSpec(oh.http_url, 200)),
                         geoip_db=write_city_db(tmp_path / "c.mmdb"), udp_timeout=2.0, ask_mirrors_once=False)
    Queue(client, keys, s).add([NewItem(h) for h in full + empty])
    before = {**{k: v for k, v in received(ou).items() if k[0] == "udp"},
              **{k: v for k, v in received(oh).items() if k[0] == "tcp"}}
    news: list[int] = []
    p = Process(s, client, keys, concurrency=4, until_idle=True, flush=False, on_visit=lambda v: news.append(v.new))
    assert p.run(signals=False) == 0
    after = {**{k: v for k, v in received(ou).items() if k[0] == "udp"},
             **{k: v for k, v in received(oh).items() if k[0] == "tcp"}}
    sent = {k: after[k] - before.get(k, 0) for k in after}

    _, status = run_json(test_env, "status")
    c = status["costs"]
    udp, http = c["trackers"][ou.udp_url]["requests"], c["trackers"][oh.http_url]["requests"]
    # every request of each kind the worker counted is one opentracker received, and no more
    assert udp["connect"] == sent[("udp", "connect")] >= 1
    assert udp["scrape"] == sent[("udp", "scrape")] >= 1
    assert udp["announce"] + udp["withdrawal"] == sent[("udp", "announce")]
    assert http["scrape"] == sent[("tcp", "scrape")] >= 1
    assert http["announce"] + http["withdrawal"] == sent[("tcp", "announce")]
    # the empty swarms were scraped, not announced to; every announce was withdrawn
    assert udp["announce"] == udp["withdrawal"] == http["announce"] == http["withdrawal"] == len(full)
    assert http["connect"] == 0
    assert c["requests"] == {k: udp[k] + http[k] for k in (*KINDS, "total")}
    assert c["tracker_requests"] == c["requests"]["total"] == sum(sent[k] for k in (
        ("udp", "connect"), ("udp", "scrape"), ("udp", "announce"), ("tcp", "scrape"), ("tcp", "announce")))
    # per visit and per pair, over the same minutes as visits_last_hour
    assert c["visits"] == status["visits_last_hour"] == len(full + empty)
    assert c["requests_per_visit"] == round(c["tracker_requests"] / c["visits"], 2)
    assert c["counted"] == sum(news) == 3 * len(full)
    assert c["counted_per_1000_requests"] == round(c["counted"] * 1000 / c["tracker_requests"], 1)
    assert c["dht_lookups"] == 0 and c["trackers_other"]["requests"]["total"] == 0
    assert 3540 <= c["window_s"] <= 3600 and c["last_minute"]["requests"] == c["requests"]
    assert c["per_second"]["total"] == pytest.approx(c["tracker_requests"] / c["window_s"], abs=1e-4)
    text = run(test_env, "status").stdout
    assert f"{c['requests_per_visit']:g} tracker requests per visit ({c['visits']} visits)" in text

    # the dashboard's /metrics carries the namespace's figures, from the same report
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(registry_for(Views(client, keys, s))).decode())}
    by_kind = {x.labels["kind"]: x.value for x in families["peercrawl_tracker_requests_per_second"].samples}
    assert set(by_kind) == set(KINDS) and all(v > 0 for v in by_kind.values())
    assert families["peercrawl_tracker_requests_per_visit"].samples[0].value == pytest.approx(
        c["requests_per_visit"], rel=0.01)


@pytest.mark.slow
def test_a_dht_lookup_counts_once_when_it_traverses(client, keys, settings):
    from crawler.settings import Settings
    from crawler.sources.dht.dht import DhtSource
    from tests.dht_swarm import HASH_A, HASH_B, HASH_C, Swarm

    counts = RequestCounts(client, keys, top=20, every=3600)
    with Swarm(size=6, first_ip=200) as swarm:
        swarm.wait_announced({HASH_A: swarm.announce(HASH_A, nodes=[0, 1], port_base=7100)})
        base = Settings(dht_bootstrap=tuple(swarm.endpoints[:2]), dht_listen=(("127.0.0.214", 0),), allow_private=True,
                        dht_timeout=6.0, dht_settle=0.5, trackers=())
        with DhtSource(base, requests=counts) as dht:
            results = [dht.lookup(h) for h in (HASH_A, HASH_B, HASH_C)]
        assert all(r.ok for r in results), [r.error for r in results]
        closed = dht.lookup(HASH_A)  # refused before any traversal
        assert not closed.ok and "closed" in closed.error
        nowhere = base.replace(dht_bootstrap=(("127.0.0.99", 9),), dht_listen=(("127.0.0.215", 0),), dht_timeout=1.5)
        with DhtSource(nowhere, requests=counts) as lonely:
            unbooted = lonely.lookup(HASH_A)  # never bootstrapped: no traversal started
        assert not unbooted.ok and "not bootstrapped" in unbooted.error
    counts.close()
    c = queue_report(Queue(client, keys, settings), time.time())["costs"]
    assert c["dht_lookups"] == 3 and c["tracker_requests"] == 0
    assert c["dht_lookups_per_second"] == round(3 / c["window_s"], 4)


def test_a_minutes_fields_stay_bounded_with_more_trackers_than_the_bound(client, keys, settings):
    fresh_minute()
    # one write: the batch's three busiest trackers get fields, the other seven one sum per kind
    w = RequestCounts(client, keys, top=3, every=3600)
    urls = [f"udp://t{i}.example:1337/announce" for i in range(10)]
    for i, url in enumerate(urls):
        for _ in range(i + 1):
            w.sent(url, "announce")
        w.sent(url, "connect")
    w.flush()
    h = minute_hash(client, keys)
    assert {f for f in h if f.startswith(("announce:", "connect:"))} == {
        f"{k}:{u}" for u in urls[7:] for k in ("announce", "connect")}
    assert (h["announce"], h["connect"]) == (55, 10)
    assert (h["others:announce"], h["others:connect"]) == (sum(range(1, 8)), 7)

    # forty workers naming 20 trackers each (800 of them) in one minute: the hash stops giving
    # fields at its bound, and every request is still in the totals and the others' sums
    writers = [RequestCounts(client, keys, top=20, every=3600) for _ in range(40)]
    for n, wr in enumerate(writers):
        for j in range(20):
            for _ in range(j + 1):
                wr.sent(f"udp://w{n}-t{j}.example:6969/announce", "scrape")
        wr.flush()
    h = minute_hash(client, keys)
    own = [f for f in h if f.startswith("scrape:")]
    assert 200 < len(own) < MINUTE_FIELDS  # the first writers' trackers got fields, then none did
    assert len(h) <= MINUTE_FIELDS + 2 * len(KINDS) + 1 + len(writers)  # and the totals, sums and marks
    assert h["scrape"] == 40 * 210 == sum(h[f] for f in own) + h["others:scrape"]
    # status shows the 20 busiest one by one and sums the rest: bounded too, and nothing lost
    c = queue_report(Queue(client, keys, settings), time.time())["costs"]
    assert [t["requests"]["total"] for t in c["trackers"].values()] == sorted((h[f] for f in own), reverse=True)[:20]
    assert c["requests"]["scrape"] == 40 * 210 == sum(t["requests"]["scrape"] for t in c["trackers"].values()) \
        + c["trackers_other"]["requests"]["scrape"]
    assert c["trackers_other"]["trackers"] == len(own) + 3 - 20  # the named ones past the top (t7-t9 too)


CHILD = r"""
import sys, time
from gevent import monkey; monkey.patch_all()
import redis
from crawler.keys import Keys
from crawler.sources.request_counts import RequestCounts
counts = RequestCounts(redis.Redis.from_url(sys.argv[1]), Keys(sys.argv[2]), top=20, every=float(sys.argv[3]))
for _ in range(7):
    counts.sent("udp://t.example:1337/announce", "announce")
counts.flush()
for _ in range(5):
    counts.sent("udp://t.example:1337/announce", "announce")
print("counted", flush=True)
time.sleep(120)
"""


def child(redis_url: str, namespace: str, every: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.Popen([sys.executable, "-c", CHILD, redis_url, namespace, str(every)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "counted", p.stderr.read()
    return p


def announced(client, keys) -> int:
    m = int(time.time()) // 60
    return sum(h.get("announce", 0) for h in each_minute(client, keys.request_minute, range(m - 2, m + 1), "test"))


def test_a_killed_worker_loses_only_what_it_had_not_written(client, keys, redis_url):
    # killed before its timer wrote: the written batch is there, the 5 counted since are lost
    p = child(redis_url, keys.namespace, every=60.0)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert announced(client, keys) == 7
    # a worker that lives the timer's few seconds has written them without being asked
    p = child(redis_url, keys.namespace, every=0.5)
    try:
        end = time.monotonic() + 5
        while announced(client, keys) < 7 + 12 and time.monotonic() < end:
            time.sleep(0.1)
        assert announced(client, keys) == 7 + 12
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)


class LostReplies:
    """A forwarder to the test Redis that loses the reply of the next ``lose`` EVALSHA commands: Redis
    runs the command, the client never hears back (the connection closes), as when a network drops a reply."""

    def __init__(self, redis_url: str):
        parts = urllib.parse.urlsplit(redis_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.lose, self.evalshas, self.lost = 0, 0, []
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        self.url = f"redis://127.0.0.1:{self.server.server_port}{parts.path}"

    def _handle(self, client, _addr):
        upstream = socket.create_connection(self.target)
        swallow = []

        def replies():
            while data := upstream.recv(65536):
                if swallow:
                    self.lost.append(data)
                    client.shutdown(socket.SHUT_RDWR)
                    return
                client.sendall(data)

        pump = gevent.spawn(replies)
        buf = b""
        try:
            while data := client.recv(65536):
                buf += data
                while (end := command_end(buf, 0)) is not None:
                    cmd, buf = buf[:end], buf[end:]
                    if b"EVALSHA" in cmd[:32].upper():
                        self.evalshas += 1
                        if self.lose > 0:
                            self.lose -= 1
                            swallow.append(True)
                    upstream.sendall(cmd)
        except OSError:
            pass
        finally:
            pump.kill()
            upstream.close()
            client.close()

    def close(self) -> None:
        self.server.stop(timeout=1)


def test_a_batch_sent_again_after_a_lost_reply_adds_nothing_twice(client, keys, redis_url):
    fresh_minute()
    client.script_load(scripts.source("request_counts", "crawler.sources"))  # EVALSHA runs the first time
    proxy = LostReplies(redis_url)
    far = redis.Redis.from_url(proxy.url, retry=Retry(NoBackoff(), 1))  # one retry, at once
    try:
        counts = RequestCounts(far, keys, top=20, every=3600)
        for _ in range(5):
            counts.sent("http://t.example/announce", "announce")
        # Redis adds the batch, its reply is lost, redis-py sends it again: still 5
        proxy.lose = 1
        counts.flush()
        assert proxy.evalshas == 2 and proxy.lost == [b":1\r\n"]  # ran twice, added by the first run
        assert minute_hash(client, keys)["announce"] == 5
        # every try's reply lost: the call fails (StoreError) and the batch is kept, as it was
        for _ in range(3):
            counts.sent("http://t.example/announce", "announce")
        proxy.lose = 2
        with pytest.raises(StoreError):
            counts.flush()
        assert minute_hash(client, keys)["announce"] == 8  # the first try was added
        counts.sent("http://t.example/announce", "withdrawal")
        counts.flush()  # the kept batch again (nothing added), then the new count
        h = minute_hash(client, keys)
        assert (h["announce"], h["withdrawal"], h["announce:http://t.example/announce"]) == (8, 1, 8)
        assert proxy.evalshas == 2 + 2 + 2
    finally:
        far.close()
        proxy.close()


@pytest.mark.slow
def test_the_operators_page_shows_the_costs_status_prints(dashboard, browser, client, keys, test_env):  # noqa: F811
    from tests.test_dashboard_browser import figure, rows_shown, wait_rendered

    passkey = "0123456789abcdef0123456789abcdef"
    counts = RequestCounts(client, keys, top=20, every=3600)
    private = f"http://tracker.example/{passkey}/announce"
    for url, n in ((private, 9), ("udp://open.example:1337/announce", 4)):
        for kind in KINDS:
            counts.sent(url, kind, n)
    for _ in range(3):
        counts.lookup()
    counts.close()
    d = browser
    d.get(dashboard + "/operators")
    wait_rendered(d)
    c = run_json(test_env, "status")[1]["costs"]
    rows = rows_shown(d, "costs")
    assert [r["tracker"] for r in rows] == list(c["trackers"]) and len(rows) == 2
    for r in rows:
        t = c["trackers"][r["tracker"]]
        assert int(r["requests"]) == t["requests"]["total"]
        for k in (*KINDS, "total"):  # rates move as the window grows between the two reads
            assert float(r[f"{k}_per_s"]) == pytest.approx(t["per_second"][k], rel=0.02)
    assert float(figure(d, "tracker_requests_per_second")) == pytest.approx(c["per_second"]["total"], rel=0.02)
    assert float(figure(d, "dht_lookups_per_second")) == pytest.approx(c["dht_lookups_per_second"], rel=0.02)
    assert c["requests"]["total"] == 4 * (9 + 4) and c["dht_lookups"] == 3
    assert passkey not in d.page_source


@pytest.mark.slow
def test_counts_are_written_and_read_on_a_redis_cluster(cluster_ns):  # noqa: F811
    from crawler.keys import Keys
    from crawler.report.costs import costs_report
    from crawler.settings import Settings
    from crawler.store import connect

    ns, url = cluster_ns  # a node holding none of the namespace's keys: every call is redirected
    client = connect.connect(Settings(redis_url=url, secret="test-secret-0123456789"))
    keys = Keys(ns)
    counts = RequestCounts(client, keys, top=20, every=3600)
    counts.sent("udp://t.example:1337/announce", "announce", 3)
    counts.lookup()
    counts.close()
    c = costs_report(client, keys, 20, time.time(), visits=0)
    assert c["requests"]["announce"] == 3 and c["dht_lookups"] == 1
    assert list(c["trackers"]) == ["udp://t.example:1337/announce"]
    client.close()
