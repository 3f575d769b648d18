"""StatHat delivery against a real local HTTP server standing in for the EZ API."""

from __future__ import annotations

import calendar
import math
import threading

import pytest

import geo
from crawler.counters import Recorder, outbox_key, top
from crawler.stathat import EZClient, Flusher, PostError
from tests.mmdb import write_city_db
from tests.stathat_sink import StatHatSink

H = "ab" * 20
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))


@pytest.fixture
def sink():
    with StatHatSink() as s:
        yield s


@pytest.fixture
def locator(tmp_path):
    return geo.open_locator(write_city_db(tmp_path / "city.mmdb"))


@pytest.fixture
def posting(settings, sink):
    return settings.replace(stathat_ezkey="test-ezkey", stathat_url=sink.url)


def lifetime_countries(client, keys):
    """Every lifetime countries.* counter, read from the indexes."""
    out = {}
    for fam in ("countries", "cities", "postcodes"):
        out.update({r["metric"]: r["count"] for r in top(client, keys, fam, limit=100_000)})
    return out


def test_client_posts_the_ez_json(sink):
    c = EZClient(sink.url, "k1")
    c.post([{"stat": "a.b", "count": 3}, {"stat": "torrents.count", "value": 7}])
    assert sink.posts == [{"ezkey": "k1", "data": [{"stat": "a.b", "count": 3}, {"stat": "torrents.count", "value": 7}]}]


def test_client_raises_post_error(sink):
    sink.fail_next(1)
    with pytest.raises(PostError, match="HTTP 500"):
        EZClient(sink.url, "k").post([{"stat": "x", "count": 1}])
    dead = StatHatSink()
    url = dead.url
    dead.close()
    with pytest.raises(PostError, match="not reachable"):
        EZClient(url, "k", timeout=2).post([{"stat": "x", "count": 1}])


def test_totals_posted_equal_the_counters(client, keys, posting, locator, sink):
    client.zadd(keys.ready, {"a" * 40: 1, "b" * 40: 1})
    client.zadd(keys.cooling, {"c" * 40: 1})
    client.zadd(keys.leases, {"d" * 40: 1})
    rec = Recorder(client, keys, posting, locator)
    fl = Flusher(client, keys, posting)
    rec.record_visit(H, ["1.1.1.1", "1.1.1.2", "2.2.2.2", "4.4.4.4", "9.9.9.9"], T0)
    assert fl.flush_once()["ok"]
    rec.record_visit(H, ["1.1.2.1", "1.1.1.1", "5.5.5.5"], T0 + 10)
    rec.record_visit("cd" * 20, ["1.1.1.1", "3.3.3.3"], T0 + 20)
    rec.visited(H, T0)
    rec.visited(H, T0 + 30)
    rec.visited("cd" * 20, T0 + 30)
    r = fl.flush_once()
    assert r["ok"] and r["requests"] == 1
    want = lifetime_countries(client, keys)
    got = sink.counts()
    assert got.pop("torrents.processed") == 2
    assert dict(got) == want
    assert sink.values("torrents.count") == [4, 4]
    assert sink.ezkeys() == {"test-ezkey"}
    assert not client.exists(outbox_key(keys)) and not client.exists(keys.sub("sh", "inflight"))


def test_failing_first_posts_lose_and_double_nothing(client, keys, posting, locator, sink):
    rec = Recorder(client, keys, posting, locator)
    fl = Flusher(client, keys, posting, chunk=2)
    sink.fail_next(3)
    ips = [f"1.1.1.{n}" for n in range(1, 30)] + [f"2.2.2.{n}" for n in range(1, 30)] + ["5.5.5.5", "3.3.3.3"]
    results = []
    for i in range(0, len(ips), 10):
        rec.record_visit(H, ips[i : i + 10], T0 + i)
        results.append(fl.flush_once())
    while not results[-1]["ok"] or client.exists(outbox_key(keys)):
        results.append(fl.flush_once())
        assert len(results) < 20
    assert [r["ok"] for r in results[:3]] == [False, False, False]
    assert all(r["ok"] for r in results[3:])
    assert dict(sink.counts()) == lifetime_countries(client, keys)
    assert sink.requests >= 3 + math.ceil(len(lifetime_countries(client, keys)) / 2)


def test_a_batch_left_in_flight_by_a_dead_flusher_is_recovered(client, keys, posting, locator, sink):
    rec = Recorder(client, keys, posting, locator)
    rec.record_visit(H, ["1.1.1.1", "2.2.2.2"], T0)
    dead = Flusher(client, keys, posting, lease_seconds=0.3)
    claimed = dead._claim(keys=dead._keys, args=[dead.token, dead.lease_ms])  # claims, then "dies"
    assert claimed[0] == 1 and not client.exists(outbox_key(keys))
    rec.record_visit(H, ["1.1.2.2"], T0 + 1)  # lands in a fresh outbox meanwhile
    live = Flusher(client, keys, posting)
    assert live.flush_once()["busy"] and sink.posts == []
    import time

    time.sleep(0.4)  # the dead flusher's lease lapses
    r = live.flush_once()
    assert r["ok"] and r["recovered"]
    assert live.flush_once()["ok"]  # then the fresh outbox
    assert dict(sink.counts()) == lifetime_countries(client, keys)
    assert sink.counts()["countries.Germany.users"] == 2


def test_http_requests_per_10000_increments(client, keys, posting, tmp_path, sink):
    # 400 cities in 20 countries; 3,334 IPs give 3 countries.* increments each.
    nets = {f"7.{c}.{k}.0/24": (f"Country {c}", f"City {c}-{k}", f"{c:02d}{k:03d}") for c in range(20) for k in range(20)}
    loc = geo.open_locator(write_city_db(tmp_path / "many.mmdb", nets))
    rec = Recorder(client, keys, posting, loc)
    ips = [f"7.{n % 20}.{(n // 20) % 20}.{n // 400 + 1}" for n in range(3334)]
    for i in range(0, len(ips), 200):
        rec.record_visit(H, ips[i : i + 200], T0)
    box = {k: int(v) for k, v in client.hgetall(outbox_key(keys)).items()}
    increments = sum(box.values())
    assert increments == 3334 * 3
    r = Flusher(client, keys, posting).flush_once()
    assert r["ok"] and r["increments"] == increments
    per_10k = r["requests"] * 10_000 / increments
    print(f"\nStatHat: {increments} increments of {len(box)} stats in {r['requests']} HTTP requests "
          f"({per_10k:.1f} per 10,000 increments; one post per increment would need 10,000)")
    assert r["requests"] == math.ceil(len(box) / 500) == sink.requests
    assert dict(sink.counts()) == lifetime_countries(client, keys)


def test_without_ezkey_nothing_is_written_or_posted(client, keys, settings, locator, sink):
    rec = Recorder(client, keys, settings.replace(stathat_url=sink.url), locator)
    rec.record_visit(H, ["1.1.1.1"], T0)
    r = Flusher(client, keys, settings.replace(stathat_url=sink.url)).flush_once()
    assert r["enabled"] is False and r["requests"] == 0
    assert sink.requests == 0 and not client.exists(outbox_key(keys))


def test_run_forever_flushes_until_stopped_and_backs_off(client, keys, posting, locator, sink):
    s = posting.replace(flush_seconds=0.05)
    rec = Recorder(client, keys, s, locator)
    fl = Flusher(client, keys, s, backoff_base=0.05, backoff_max=0.2)
    sink.fail_next(2)
    stop = threading.Event()
    t = threading.Thread(target=fl.run_forever, args=(stop,), kwargs={"sweep": lambda: rec.sweep(16)})
    rec.record_visit(H, ["1.1.1.1", "2.2.2.2"], T0)
    t.start()
    try:
        for _ in range(100):
            if sink.counts():
                break
            threading.Event().wait(0.05)
        rec.record_visit(H, ["1.1.1.3"], T0)
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert sink.requests >= 3
    assert dict(sink.counts()) == lifetime_countries(client, keys)
