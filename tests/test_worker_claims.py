"""The next claims of many runners made together (workers.claims), on the real Redis."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import gevent
import redis

from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.torrents.items import NewItem
from tests.namespaces import delete_namespace
from tests.test_connect import private_redis  # noqa: F401 (fixture)
from workers.claims import Claims


def hashes(n: int) -> list[str]:
    return [hashlib.sha1(f"claims-{i}".encode()).hexdigest() for i in range(n)]


def test_runners_asking_together_share_one_claim_and_get_the_best_torrents_in_the_order_asked(
        client, keys, settings):
    other = Keys(keys.namespace + "-one")
    try:
        q, alone = Queue(client, keys, settings), Queue(client, other, settings.replace(namespace=other.namespace))
        for queue in (q, alone):
            queue.add([NewItem(h) for h in hashes(30)])
        claims = Claims(q)
        asks = [1, 1, 2, 1, 3, 1]
        jobs = [gevent.spawn(claims.claim, n) for n in asks]
        gevent.joinall(jobs, raise_error=True)
        assert claims.batches == 1 and claims.units == sum(asks)
        got = [lease.info_hash for j in jobs for lease in j.value]
        assert [len(j.value) for j in jobs] == asks
        # exactly what one claim of their sum takes, in the order asked
        assert got == [lease.info_hash for lease in alone.claim(sum(asks))]
        # fewer ready than asked: the first askers are served, the last get none
        jobs = [gevent.spawn(claims.claim, 10) for _ in range(3)]
        gevent.joinall(jobs, raise_error=True)
        assert [len(j.value) for j in jobs] == [10, 10, 30 - sum(asks) - 20]
        assert claims.claim(0) == [] and claims.claim(1) == []
    finally:
        delete_namespace(client, other.namespace)


def test_a_claim_that_fails_answers_no_torrent_and_the_next_one_works(keys, settings, private_redis):  # noqa: F811
    url, admin = private_redis
    client = redis.Redis.from_url(url, socket_timeout=0.3, retry=None)
    q = Queue(client, keys, settings)
    q.add([NewItem(h) for h in hashes(5)])
    claims = Claims(q)
    admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")  # Redis stops answering writes for 1.5 s
    jobs = [gevent.spawn(claims.claim, 1) for _ in range(4)]
    gevent.joinall(jobs, raise_error=True)
    assert [j.value for j in jobs] == [[]] * 4 and not claims.busy
    gevent.sleep(1.6)
    assert len(claims.claim(5)) == 5


def test_a_claim_ahead_under_way_at_the_stop_is_handed_back_with_what_was_held(client, keys, settings):
    q = Queue(client, keys, settings)
    q.add([NewItem(h) for h in hashes(40)])
    claims = Claims(q, ahead=lambda: 16)
    assert len(claims.claim(1)) == 1 and len(claims.held) == 16  # the first claim holds 16 ahead
    taken = [claims.claim(1)[0] for _ in range(9)]  # fewer than half left: a claim ahead is spawned
    gevent.sleep(0)  # and sent
    assert claims.busy
    claims.release_held()  # the stop comes while it is under way
    assert not claims.busy and not claims.held
    leased = {m.decode() for m in client.zrange(keys.leases, 0, -1)}
    # only the ten handed to runners are out; what the claim ahead brought went back to ready
    assert len(leased) == 10 and {lease.info_hash for lease in taken} <= leased
    assert claims.claim(1) and not claims.busy and not claims.held  # and nothing more is held ahead


def test_a_lease_handed_out_from_what_is_held_is_the_held_one_stamped_now(client, keys, settings):
    q = Queue(client, keys, settings)
    q.add([NewItem(h) for h in hashes(8)], lane="high")
    claims = Claims(q, ahead=lambda: 4)
    claims.claim(1)
    held = [lease for lease, _ in claims.held]
    assert held and all(lease.lane == "high" for lease in held)
    for want in held:
        before = time.time()
        (got,) = claims.claim(1)
        # every field of the lease kept (the lane, the token), only the claim time renewed
        assert got == replace(want, claimed=got.claimed) and got.claimed >= before
