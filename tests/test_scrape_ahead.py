"""Scrape ahead (workers/scrape_ahead.py): full scrape packets whatever the pool's size, against a real
opentracker with no rate, counts equal to the truth; what a peek asks, and for whom; the torrents
claimed ahead handed back at a stop."""

from __future__ import annotations

import hashlib
import os
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from crawler.counters.rankings import top
from crawler.counters.recorder import Recorder
from crawler.queue.queue import Queue
from crawler.queue.source_notes import tracker_list
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.source_settings import TrackerSpec
from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.health import FAILURE
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests.mmdb import write_city_db
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from workers.process import Process
from workers.visit import Visitor

PEERCRAWL = os.path.join(os.path.dirname(sys.executable), "peercrawl")
ROOT = str(Path(__file__).resolve().parent.parent)


def hashes(tag: str, n: int) -> list[str]:
    return [hashlib.sha1(f"{tag}-{i}".encode()).hexdigest() for i in range(n)]


def udp_received(ot) -> dict[str, int]:
    """The UDP requests opentracker received, by kind (its statistics page)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ot.port}/stats?mode=everything", timeout=5) as r:
        page = r.read().decode()
    udp = re.search(r"<udp>(.*?)</udp>", page, re.S).group(1)
    return {k: int(re.search(rf"<{k}>(\d+)</{k}>", udp).group(1)) for k in ("connect", "announce", "scrape")}


class Relay:
    """A UDP relay in front of a real tracker that notes how many info-hashes each scrape carried:
    ``scrapes``, one count per scrape datagram (a BEP 15 scrape is 16 bytes and 20 per hash)."""

    def __init__(self, port: int):
        self.target = ("127.0.0.1", port)
        self.scrapes: list[int] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"udp://127.0.0.1:{self.sock.getsockname()[1]}/announce"
        self.up: dict[tuple, socket.socket] = {}  # client address -> its socket to the tracker
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            ready, _, _ = select.select([self.sock, *self.up.values()], [], [], 0.2)
            for r in ready:
                data, addr = r.recvfrom(65536)
                if r is self.sock:
                    if len(data) >= 16 and struct.unpack_from(">I", data, 8)[0] == u.SCRAPE:
                        self.scrapes.append((len(data) - 16) // 20)
                    if addr not in self.up:
                        self.up[addr] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    self.up[addr].sendto(data, self.target)
                else:
                    client = next(a for a, up in self.up.items() if up is r)
                    self.sock.sendto(data, client)

    def close(self):
        self.stopped = True
        self.thread.join(2)
        for up in self.up.values():
            up.close()
        self.sock.close()


@pytest.mark.interpreted
@pytest.mark.parametrize(("concurrency", "n"), [(8, 222), (64, 592)])
def test_a_worker_fills_its_udp_scrape_packets_whatever_its_concurrency(opentracker, settings, client, keys,  # noqa: F811
                                                                       tmp_path, concurrency, n):
    # n torrents behind one opentracker with no rate, one in ten with two peers: a pool of 8 has 8
    # visits under way and one of 64 has 64, yet the worker's scrapes go out 74 hashes to a packet
    # (BEP 15's most) but for the ends of its claims: at least 50 on average, and most hashes in
    # packets fuller than a pool of 64 could ever fill by grouping the scrapes of its visits.
    hs = hashes(f"fill{concurrency}", n)
    ot = opentracker(hs)
    relay = Relay(ot.port)
    live = hs[::10]
    truth = {}
    for i, h in enumerate(live):
        truth[h] = {peer_address(2 * i), peer_address(2 * i + 1)}
        for ip in truth[h]:
            ot.announce_from(ip, h, 6881)
    s = settings.replace(geoip_db=write_city_db(tmp_path / "c.mmdb"))
    Queue(client, keys, s).add([NewItem(h, (relay.url,)) for h in hs])
    before = udp_received(ot)
    try:
        p = Process(s, client, keys, concurrency=concurrency, until_idle=True, flush=False)
        # each torrent's plan (trackers and source notes) is read once: by the peek when it was
        # claimed ahead, its visit then taking it, or else by its visit (counted, not replaced)
        reads = {"visit": 0, "ahead": 0}
        plan, plans = p.queue.plan_many, p.visitor.ahead._plans

        def visit_plan(hs, defaults):
            reads["visit"] += len(hs)
            return plan(hs, defaults)

        def ahead_plans(hs):
            reads["ahead"] += len(hs)
            return plans(hs)

        p.queue.plan_many, p.visitor.ahead._plans = visit_plan, ahead_plans  # type: ignore[method-assign]
        assert p.run(signals=False) == 0
    finally:
        relay.close()
    assert reads["visit"] <= concurrency + n // 10 and n <= reads["visit"] + reads["ahead"] <= n * 1.1, reads
    sent = {k: v - before[k] for k, v in udp_received(ot).items()}
    assert sent["scrape"] == len(relay.scrapes) and sum(relay.scrapes) >= n  # each torrent scraped
    assert sum(relay.scrapes) / len(relay.scrapes) >= 50, relay.scrapes
    assert sum(k for k in relay.scrapes if k > 64) >= n / 2, relay.scrapes
    # the empty swarms were settled by their scrapes; each live one announced and withdrew once
    assert sent["announce"] == 2 * len(live), sent
    view = QueueView(client, keys)
    assert view.counts()["in_flight"] == 0 and view.counts()["cooling"] == n
    counted = {m["metric"].split(".")[1]: m["count"] for m in top(client, keys, "torrents", limit=n + 10)}
    assert counted == {h: len(ips) for h, ips in truth.items()}


class RecordingTracker:
    """A UDP tracker that answers connects and scrapes: each torrent's seeders and leechers are the
    first two bytes of its info-hash (so an answer names the torrent it was for). ``packets``: the
    info-hashes (hex) of each scrape, with when it arrived (monotonic)."""

    def __init__(self):
        self.packets: list[tuple[float, list[str]]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"udp://127.0.0.1:{self.sock.getsockname()[1]}/announce"
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            try:
                data, addr = self.sock.recvfrom(2048)
            except (TimeoutError, OSError):
                continue
            if len(data) < 16:
                continue
            action, tid = struct.unpack_from(">II", data, 8)
            if action == u.CONNECT:
                self.sock.sendto(u.encode_reply(u.ConnectReply(tid, 42)), addr)
            elif action == u.SCRAPE:
                asked = [data[i:i + 20] for i in range(16, len(data), 20)]
                self.packets.append((time.monotonic(), [h.hex() for h in asked]))
                body = b"".join(struct.pack(">III", h[0], 0, h[1]) for h in asked)
                self.sock.sendto(struct.pack(">II", u.SCRAPE, tid) + body, addr)

    def close(self):
        self.stopped = True
        self.thread.join(2)
        self.sock.close()


def test_a_peek_scrapes_what_the_visits_would_ask_and_each_seat_answers_its_own_torrent(settings, client, keys):
    t, down = RecordingTracker(), RecordingTracker()
    rate = 4.0  # the tracker's own cap: two packets ahead go a quarter of a second apart
    s = settings.replace(trackers=(TrackerSpec(t.url, 50, rate),), revisit_seconds=60.0, udp_timeout=0.5)
    trackers = Trackers(s, client, keys)
    q = Queue(client, keys, s)
    visitor = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        hs = hashes("peek", 150)
        held, later = hs[0], hs[1]
        q.add([NewItem(h, (down.url,)) for h in hs])
        now = time.time()
        # due within the horizon (30 s), one beyond it
        client.zadd(keys.cooling, {h: now + 5 + i * 0.01 for i, h in enumerate(hs)} | {later: now + 45})
        q.plans.hold_trackers(held, {t.url: now + 3600}, 7200)  # inside the default tracker's min interval
        for _ in range(s.tracker_backoff_after):  # the torrents' own tracker backs off
            trackers.health.record(down.url, FAILURE, message="TrackerTimeout: test")
        assert trackers.health.backing_off_until(down.url) is not None
        visitor.ahead.peek()
        seats = dict(visitor.ahead.seats)
        for seat in seats.values():
            seat.get()  # every answer in
        # 148 torrents ask the default tracker: two full packets, neither the held one nor the later one
        assert sorted(len(p) for _, p in t.packets) == [74, 74]
        asked = [h for _, p in t.packets for h in p]
        assert sorted(asked) == sorted(set(hs) - {held, later}) == sorted(h for _, h in seats)
        # each packet took its place in the tracker's cap: the second's a quarter of a second later
        first, second = ({seats[(t.url, h)].send_at for h in p} for _, p in t.packets)
        assert len(first) == len(second) == 1 and abs(second.pop() - first.pop()) >= 1 / rate - 0.05
        assert down.packets == []  # a tracker that backs off is not scraped ahead
        # each visit takes its own torrent's seat and reads its own counts; a torrent not asked takes its own
        for h in (asked[0], asked[-1]):
            seat = visitor.ahead.seat(t.url, h, 5.0)
            counts = seat.get()
            assert (counts.seeders, counts.leechers) == (int(h[:2], 16), int(h[2:4], 16))
            again = visitor.ahead.seat(t.url, h, 5.0)  # once: a second visit asks for itself
            assert again is not seat and again.get() == counts
        own = visitor.ahead.seat(t.url, held, 5.0).get()
        assert (own.seeders, own.leechers) == (int(held[:2], 16), int(held[2:4], 16))
        assert held in t.packets[-1][1]
    finally:
        trackers.close()
        t.close()
        down.close()


def test_what_a_worker_claimed_ahead_is_handed_back_when_it_stops(opentracker, settings, client, keys,  # noqa: F811
                                                                tmp_path):
    # A cap of 40 requests a second: each of these visits announces and withdraws, so a pool of 4
    # visits ~20 a second and holds what it claimed ahead; --duration ends it midway.
    hs = hashes("stop", 150)
    ot = opentracker(hs)
    for h in hs:
        ot.announce_from(peer_address(1), h, 6881)
    s = settings.replace(geoip_db=write_city_db(tmp_path / "c.mmdb"), max_announces_per_second=40.0)
    Queue(client, keys, s).add([NewItem(h, (ot.udp_url,)) for h in hs])
    held: list[int] = []
    p = Process(s, client, keys, concurrency=4, duration=2.0, flush=False,
                on_visit=lambda v: held.append(len(p.visitor.claims.held)))
    assert p.run(signals=False) == 0
    assert max(held) > 0  # torrents were claimed ahead of the runners
    c = QueueView(client, keys).counts()
    done = sum(QueueView(client, keys).torrent(h)["visits"] for h in hs)
    # every torrent held and not visited is back in ready at once, none left to expire
    assert c["in_flight"] == 0 and (c["cooling"], c["ready"]) == (done, len(hs) - done)
    assert 0 < done < len(hs)


def test_a_worker_killed_while_it_holds_torrents_ahead_loses_none_and_counts_none_twice(opentracker, test_env,  # noqa: F811
                                                                                       client, keys, tmp_path):
    # Slow visits (a cap of 10 requests a second: an announce and its withdrawal each), so the worker
    # holds torrents claimed ahead beside its two runners' when it is killed outright.
    hs = hashes("kill", 40)
    ot = opentracker(hs)
    truth = {h: {peer_address(i), peer_address(i + 100)} for i, h in enumerate(hs)}
    for h, ips in truth.items():
        for ip in ips:
            ot.announce_from(ip, h, 6881)
    env = dict(test_env, PYTHONPATH=ROOT + os.pathsep + test_env.get("PYTHONPATH", ""),
               GEOIP_DB=str(write_city_db(tmp_path / "c.mmdb")), PEERCRAWL_LEASE_SECONDS="6",
               PEERCRAWL_MAX_ANNOUNCES_PER_SECOND="10")
    s = Settings(redis_url=env["REDIS_URL"], namespace=env["PEERCRAWL_NAMESPACE"], trackers=(), dht=False,
                 allow_private=True, secret=env["PEERCRAWL_SECRET"], data_dir=tmp_path / "q")
    Queue(client, keys, s).add([NewItem(h, (ot.udp_url,)) for h in hs])
    w = subprocess.Popen([PEERCRAWL, "worker", "--concurrency", "2"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 20
        while client.zcard(keys.leases) <= 2 and time.monotonic() < end:  # two runners' leases, and more
            time.sleep(0.05)
        assert client.zcard(keys.leases) > 2
    finally:
        w.kill()
        w.wait(5)
    held = {m.decode() for m in client.zrange(keys.leases, 0, -1)}
    time.sleep(6.5)  # the killed worker's leases expire
    r = subprocess.run([PEERCRAWL, "worker", "--until-idle", "--concurrency", "4"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    view = QueueView(client, keys)
    c = view.counts()
    assert (c["in_flight"], c["ready"], c["cooling"]) == (0, 0, len(hs))
    assert all(view.torrent(h)["visits"] >= 1 for h in held)
    counted = {m["metric"].split(".")[1]: m["count"] for m in top(client, keys, "torrents", limit=100)}
    assert counted == {h: len(ips) for h, ips in truth.items()}


def test_a_plan_read_ahead_is_taken_once_by_the_visit_of_its_lease_only(settings, client, keys):
    # a torrent claimed ahead: the peek reads its trackers and notes; a visit under another lease of it
    # (the lease went back and was claimed again) reads its own, and the one of the lease takes it once
    s = settings.replace(revisit_seconds=60.0)
    trackers = Trackers(s, client, keys)
    q = Queue(client, keys, s)
    visitor = Visitor(q, keys, s, trackers, Recorder(client, keys, s))
    try:
        [h] = hashes("plan-read", 1)
        q.add([NewItem(h, ("udp://127.0.0.1:9/announce",))])
        [lease] = q.claim(1)
        q.plans.hold_trackers(h, {"udp://127.0.0.1:9/announce": time.time() + 3600}, 7200)
        visitor.ahead.held([lease])
        visitor.ahead.peek()
        assert visitor.ahead.plan_read(h, lease.token + 1) is None  # another lease's visit: not this plan
        visitor.ahead.held([lease])
        visitor.ahead.peek()
        urls, planned = visitor.ahead.plan_read(h, lease.token)
        now_read = q.plan(h)  # what the visit would have read itself
        assert urls == tracker_list(tuple(t.url for t in s.trackers), now_read.own)
        assert planned.notes.not_before == now_read.notes.not_before and planned.notes.not_before
        assert planned.fetch_from is now_read.fetch_from is None  # metadata off: not read
        assert visitor.ahead.plan_read(h, lease.token) is None  # taken once
    finally:
        trackers.close()
