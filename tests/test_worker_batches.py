"""A worker killed in the middle of a shared round trip (crawler.store.coalesce): nothing lost,
nothing counted twice.

The worker (a ``peercrawl worker`` subprocess, 16 visits at once, three
shards) reaches Redis through a proxy that passes its commands up to a
chosen one and holds the rest (tests/holding_proxy.py), so it is killed with
Redis having run a prefix of a pipeline that holds several visits' calls:
some visits' peers recorded, their completions not sent. A
fresh worker then finishes the crawl once the leases expired.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid

import pytest
import redis

from crawler.queue.view import QueueView
from crawler.store import layout, scripts
from tests.holding_proxy import kill_when_held
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.opentracker import opentracker  # noqa: F401 (fixture)
from tests.test_worker_e2e import PEERCRAWL, PLACES, ROOT, announce, counter, h, pc, pcj

TORRENTS = 30


def worker(env: dict):
    """A ``worker --until-idle`` of 16 runners, started on a Redis URL."""
    return lambda url: subprocess.Popen(PEERCRAWL + ["worker", "--concurrency", "16", "--until-idle"],
                                        env={**env, "REDIS_URL": url}, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)


def sha(name: str, package: str) -> bytes:
    """The SHA a worker calls ``package``'s ``name``.lua by."""
    return hashlib.sha1(scripts.source(name, package).encode()).hexdigest().encode()


def held_before_completion():
    """A proxy's ``hold_at`` holding the first visit completion sent after a recording."""
    record, complete = sha("record", "crawler.counters"), sha("complete", "crawler.queue")
    recorded = False

    def hold_at(words: list[bytes]) -> bool:
        nonlocal recorded
        called = words[1] if words[0].upper() == b"EVALSHA" else None
        recorded = recorded or called == record
        return recorded and called == complete
    return hold_at


def held_at_recording(n: int):
    """A proxy's ``hold_at`` holding the ``n``-th recording call."""
    record, calls = sha("record", "crawler.counters"), 0

    def hold_at(words: list[bytes]) -> bool:
        nonlocal calls
        calls += words[0].upper() == b"EVALSHA" and words[1] == record
        return calls == n
    return hold_at


def crawl_killed_at(env: dict, redis_url: str, hold_at, view: QueueView) -> dict:
    """Run a worker through a proxy holding its commands from ``hold_at``'s on, SIGKILL it once held;
    what it left (``view``'s counts, read at once: the worker's 2 s leases lapse soon after, while a
    ``status`` process may still be starting on a loaded machine)."""
    kill_when_held(redis_url, 1 << 40, worker(env), settle=0.3, hold_at=hold_at)  # the passed commands run
    return view.counts()


@pytest.mark.slow
def test_a_worker_killed_mid_round_trip_loses_nothing_and_counts_nothing_twice(test_env, opentracker,  # noqa: F811
                                                                               redis_url, tmp_path):
    hashes = [h(f"batch{i}") for i in range(TORRENTS)]
    ot = opentracker(hashes)
    announced = {ih: announce(ot, ih, 3 + i % 5, 10 * i) for i, ih in enumerate(hashes)}
    every = set().union(*announced.values())
    want_countries = {"countries.Germany.users": sum(ip.startswith("127.1.0.") for ip in every),
                      "countries.Japan.users": sum(ip.startswith("127.1.1.") for ip in every)}
    client = redis.Redis.from_url(redis_url)

    def world(tag: str) -> dict:
        ns = "pctest-" + uuid.uuid4().hex[:12]
        return dict(test_env, PEERCRAWL_NAMESPACE=ns, PYTHONPATH=ROOT + os.pathsep + test_env.get("PYTHONPATH", ""),
                    GEOIP_DB=str(write_city_db(tmp_path / f"city{tag}.mmdb", PLACES)),
                    PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_REVISIT_SECONDS="3600", PEERCRAWL_LEASE_SECONDS="2",
                    # every swarm here has peers, so a scrape would only add a stage before the same
                    # announce; without it the commands stay where the recordings are
                    PEERCRAWL_SCRAPE="off", PEERCRAWL_QUEUE_SHARDS="3")

    # Two kills, each at a command picked by what it is, not by its place in the crawl (which moves
    # with the machine's speed and how its load batched the round trips): before the first completion
    # sent after a recording (Redis ran recordings whose visits never complete), and before the
    # second recording (Redis ran one recording's call of a round trip that held more).
    for where, hold_at in (("before a completion", held_before_completion()),
                           ("inside a recording", held_at_recording(2))):
        env = world(where.replace(" ", "-"))
        ns = env["PEERCRAWL_NAMESPACE"]
        try:
            pcj(env, "add", *hashes)
            # the torrents' states read here, not by 30 commands each: the commands are other tests' to try
            view = QueueView(client, layout.resolve(client, ns, 3))
            at_kill = crawl_killed_at(env, redis_url, hold_at, view)
            users = {m: c for m, c in counter(env, "torrents").items() if m.endswith(".users")}
            visited = sum(view.torrent(ih)["visits"] for ih in hashes)
            assert at_kill["in_flight"] > 0, where
            if where == "before a completion":
                # recorded but not completed: counted peers of torrents whose visit never completed
                assert len(users) > visited == 0, (where, len(users), visited)
            time.sleep(2.1)  # the killed worker's leases expire
            pc(env, "worker", "--until-idle", "--concurrency", "8", timeout=90)
            status = pcj(env, "status")
            assert (status["tracked"], status["in_flight"], status["ready"], status["evicted"]) == (TORRENTS, 0, 0, 0)
            torrents = counter(env, "torrents")
            for ih, ips in announced.items():
                t = view.torrent(ih)
                assert t["state"] == "cooling" and t["visits"] >= 1, (where, t)
                assert torrents[f"torrents.{ih}.users"] == len(ips), where
            assert counter(env, "countries") == want_countries, where
        finally:
            delete_namespace(client, ns)
