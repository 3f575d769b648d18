"""A worker killed in the middle of a shared round trip (crawler.store.coalesce): nothing lost,
nothing counted twice.

The worker (a ``peercrawl worker`` subprocess, 16 visits at once, three
shards) reaches Redis through a proxy that passes its first n commands and
holds the rest (tests/holding_proxy.py), so it is killed with Redis having
run a prefix of a pipeline that holds several visits' calls: some visits'
peers recorded in some counter shards, their completions not sent. A
fresh worker then finishes the crawl once the leases expired.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest
import redis

from crawler.queue.view import QueueView
from crawler.store import layout
from tests.holding_proxy import ExitedFirst, commands_of, kill_when_held
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


def crawl_killed_after(env: dict, redis_url: str, commands: int, view: QueueView) -> dict:
    """Run a worker through a proxy passing ``commands`` commands, SIGKILL it once held; what it left
    (``view``'s counts, read at once: the worker's 2 s leases lapse soon after, while a ``status``
    process may still be starting on a loaded machine)."""
    kill_when_held(redis_url, commands, worker(env), settle=0.3)  # the passed commands run
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
    landed_mid_visit = 0

    def world(tag: str) -> dict:
        ns = "pctest-" + uuid.uuid4().hex[:12]
        return dict(test_env, PEERCRAWL_NAMESPACE=ns, PYTHONPATH=ROOT + os.pathsep + test_env.get("PYTHONPATH", ""),
                    GEOIP_DB=str(write_city_db(tmp_path / f"city{tag}.mmdb", PLACES)),
                    PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_REVISIT_SECONDS="3600", PEERCRAWL_LEASE_SECONDS="2",
                    # every swarm here has peers, so a scrape would only add a stage before the same
                    # announce; without it the commands stay where the recordings are
                    PEERCRAWL_SCRAPE="off", PEERCRAWL_QUEUE_SHARDS="3")

    # How many commands a whole crawl of this world sends (the worker's start, then round trips of
    # many visits' recordings and completions, then its stop), so the kills below land inside it.
    env = world("all")
    try:
        pcj(env, "add", *hashes)
        total = commands_of(redis_url, worker(env))
    finally:
        delete_namespace(client, env["PEERCRAWL_NAMESPACE"])
    # Where a visit's recording falls in the worker's commands moves with the machine's speed and the
    # batches' sizes: the kill is moved by halves, later while nothing was counted yet, earlier while
    # every counted visit was completed, until one lands between a recording and its completion
    # (twelve runs at most: the window is a few commands of a crawl's hundreds, more of them on a
    # loaded machine, which eight halvings were seen to stop short of). Each run's crawl, however
    # the kill fell, is finished and checked.
    early, late = 0, total
    for _ in range(12):
        if landed_mid_visit or late - early < 2:
            break
        commands = (early + late) // 2
        env = world(str(commands))
        ns = env["PEERCRAWL_NAMESPACE"]
        try:
            pcj(env, "add", *hashes)
            # the torrents' states read here, not by 30 commands each: the commands are other tests' to try
            view = QueueView(client, layout.resolve(client, ns, 3))
            try:
                at_kill = crawl_killed_after(env, redis_url, commands, view)
            except ExitedFirst:  # every torrent visited before that command: no kill to check here
                late = commands
                continue
            users = {m: c for m, c in counter(env, "torrents").items() if m.endswith(".users")}
            visited = sum(view.torrent(ih)["visits"] for ih in hashes)
            # recorded but not completed: counted peers of torrents whose visit never completed
            landed_mid_visit += len(users) > visited and at_kill["in_flight"] > 0
            if not users:
                early = commands
            elif len(users) == visited:
                late = commands
            time.sleep(2.1)  # the killed worker's leases expire
            pc(env, "worker", "--until-idle", "--concurrency", "8", timeout=90)
            status = pcj(env, "status")
            assert (status["tracked"], status["in_flight"], status["ready"], status["evicted"]) == (TORRENTS, 0, 0, 0)
            torrents = counter(env, "torrents")
            for ih, ips in announced.items():
                t = view.torrent(ih)
                assert t["state"] == "cooling" and t["visits"] >= 1, (commands, t)
                assert torrents[f"torrents.{ih}.users"] == len(ips), commands
            assert counter(env, "countries") == want_countries, commands
        finally:
            delete_namespace(client, ns)
    assert landed_mid_visit >= 1, "some kill should land between a visit's recording and its completion"
