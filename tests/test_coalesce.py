"""Script calls of many greenlets in shared round trips (crawler.store.coalesce), on the real Redis."""

from __future__ import annotations

import gevent
import pytest
import redis

from crawler.store.coalesce import Coalescer
from crawler.store.outage import Once
from crawler.store.store import Store

# A script that sleeps a little in Redis, so greenlets calling meanwhile queue behind it.
SLOW = "local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; " \
       "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > 2000; " \
       "return redis.call('INCRBY', KEYS[1], ARGV[1])"
FAILS = "return redis.error_reply('bad call ' .. ARGV[1])"


@pytest.fixture
def coalesced(redis_url):
    c = redis.Redis.from_url(redis_url)
    store = Store.coalesced(c)
    yield store, store.coalescer
    c.close()


def test_greenlets_share_round_trips_and_each_gets_its_own_replies(coalesced, keys):
    store, co = coalesced
    client = store.client
    incr = client.register_script(SLOW)
    k = [keys.scratch("co", str(i)) for i in range(50)]

    def caller(i: int) -> list:
        return store.run([(incr, [k[i]], [i]), (incr, [k[i]], [1000])])

    jobs = [gevent.spawn(caller, i) for i in range(50)]
    gevent.joinall(jobs, raise_error=True)
    assert [j.value for j in jobs] == [[i, i + 1000] for i in range(50)]
    assert co.units == 100
    # the first caller went alone; everyone queued behind it shared the next trips
    assert co.batches <= 5, co.batches
    assert [int(client.get(x)) for x in k] == [i + 1000 for i in range(50)]


def test_a_round_trip_is_never_larger_than_max_calls_but_a_large_request_goes_whole(redis_url, keys):
    client = redis.Redis.from_url(redis_url)
    co = Coalescer(client, max_calls=4)
    store = Store(client, co)
    incr = client.register_script(SLOW)
    k = keys.scratch("co", "n")
    jobs = [gevent.spawn(store.run, [(incr, [k], [1])] * (10 if i == 3 else 1)) for i in range(9)]
    gevent.joinall(jobs, raise_error=True)
    assert int(client.get(k)) == 18
    # 8 lone calls of at most 4 per trip, and the request of 10 alone: at least 2 + 1 trips
    assert co.batches >= 3
    assert co.units == 18


def test_an_error_reply_fails_its_own_caller_only(coalesced, keys):
    store, co = coalesced
    client = store.client
    incr, fails = client.register_script(SLOW), client.register_script(FAILS)
    k = keys.scratch("co", "e")

    def good() -> list:
        return store.run([(incr, [k], [1])])

    def bad() -> list:
        return store.run([(incr, [k], [1]), (fails, [k], ["x"])])

    jobs = [gevent.spawn(good), gevent.spawn(bad), gevent.spawn(good), gevent.spawn(bad), gevent.spawn(good)]
    gevent.joinall(jobs)
    assert [j.successful() for j in jobs] == [True, False, True, False, True]
    assert "bad call x" in str(jobs[1].exception)
    assert isinstance(jobs[1].exception, redis.ResponseError)
    # the failing callers' first calls ran: each call is its own step, as without batching
    assert int(client.get(k)) == 5


def test_a_failed_round_trip_fails_every_caller_in_it_and_the_next_trip_works(redis_url, keys):
    # A client on a port where nothing listens, with no retries: every round trip fails at once.
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=None)
    store = Store.coalesced(dead)
    co = store.coalescer
    incr = dead.register_script(SLOW)
    jobs = [gevent.spawn(store.run, [(incr, [keys.scratch("co", "d")], [1])]) for _ in range(5)]
    gevent.joinall(jobs)
    assert all(isinstance(j.exception, redis.ConnectionError) for j in jobs)
    assert co.batches >= 1 and not co.busy


def test_calls_inside_once_go_at_once_in_their_own_greenlet(coalesced, keys):
    store, co = coalesced
    client = store.client
    incr = client.register_script(SLOW)
    with Once():
        assert store.run([(incr, [keys.scratch("co", "o")], [3])]) == [3]
    assert co.batches == 0


def test_a_killed_caller_does_not_stop_the_others(coalesced, keys):
    store, co = coalesced
    client = store.client
    incr = client.register_script(SLOW)
    k = keys.scratch("co", "k")
    jobs = [gevent.spawn(store.run, [(incr, [k], [1])]) for _ in range(10)]
    gevent.sleep(0)  # all queued; the first trip is in flight
    jobs[5].kill()
    gevent.joinall(jobs)
    assert isinstance(jobs[5].value, gevent.GreenletExit)
    others = [j.value for i, j in enumerate(jobs) if i != 5]
    assert all(isinstance(v, list) and len(v) == 1 for v in others)
    # the killed caller's call was already queued: it ran (a kill after the send, as without batching)
    assert int(client.get(k)) == 10


def test_calls_queued_behind_a_failed_round_trip_fail_with_it(keys):
    # A server that accepts and never answers: the first trip times out after 0.3 s, and the
    # calls queued meanwhile fail with it instead of each waiting a timeout of their own.
    from gevent.server import StreamServer

    mute = StreamServer(("127.0.0.1", 0), lambda sock, addr: sock.recv(1 << 16) and gevent.sleep(5))
    mute.start()
    try:
        c = redis.Redis(host="127.0.0.1", port=mute.server_port, socket_timeout=0.3, retry=None)
        co = Coalescer(c, in_flight=1)
        store = Store(c, co)
        incr = c.register_script(SLOW)
        call = [(incr, [keys.scratch("co", "q")], [1])]
        first = gevent.spawn(store.run, call)
        gevent.sleep(0.05)  # the first call is in flight alone
        rest = [gevent.spawn(store.run, call) for _ in range(7)]
        gevent.joinall([first, *rest], timeout=5)
        assert all(isinstance(j.exception, redis.TimeoutError) for j in [first, *rest])
        assert co.batches == 1
    finally:
        mute.stop()
