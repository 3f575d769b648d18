"""``peercrawl worker --processes N``: several worker processes under one supervisor, against a real
opentracker and a real Redis (workers/supervisor.py)."""

from __future__ import annotations

import subprocess
import time

import pytest

from crawler.settings import Settings
from tests.opentracker import opentracker  # noqa: F401 (fixture)
from tests.test_worker_e2e import PEERCRAWL, announce, counter, env, h, pc, pcj, sigterm_while_visits_wait  # noqa: F401 (fixture)
from workers.supervisor import child_env, shares

pytestmark = pytest.mark.slow


def children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def wait_for(cond, timeout: float, what: str):
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_max_visits_is_shared_out_and_the_remainder_goes_first():
    assert shares(30, 2) == [15, 15] and shares(7, 3) == [3, 2, 2] and shares(1, 3) == [1, 0, 0]
    assert shares(None, 4) == [None] * 4


def test_each_child_gets_its_own_port_of_every_fixed_dht_listen_address():
    s = Settings.from_env({"PEERCRAWL_DHT_LISTEN": "0.0.0.0:6881,[::]:6881,[::1]:0", "PEERCRAWL_METRICS_PORT": "9100"})
    envs = [child_env(s, i, 3, {"KEPT": "1"}) for i in range(3)]
    assert [e["PEERCRAWL_DHT_LISTEN"] for e in envs] == [
        "0.0.0.0:6881,[::]:6881,[::1]:0", "0.0.0.0:6882,[::]:6882,[::1]:0", "0.0.0.0:6883,[::]:6883,[::1]:0"]
    assert [e["PEERCRAWL_METRICS_PORT"] for e in envs] == ["9100", "9101", "9102"]
    assert all(e["KEPT"] == "1" and e["PEERCRAWL_PROCESSES"] == "1" for e in envs)
    assert Settings.from_env(envs[2]).dht_listen == (("0.0.0.0", 6883), ("::", 6883), ("::1", 0))
    # ports the system picks are left to it: nothing to split
    assert "PEERCRAWL_DHT_LISTEN" not in child_env(Settings.from_env({}), 1, 2, {})


def test_two_processes_crawl_exactly_and_max_visits_means_the_whole(env, opentracker):  # noqa: F811
    hashes = [h(f"procs{i}") for i in range(40)]
    ot = opentracker(hashes)
    announced = {ih: announce(ot, ih, 2 + i % 3, 5 * i) for i, ih in enumerate(hashes)}
    env.update(PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_REVISIT_SECONDS="3600")
    pcj(env, "add", *hashes)
    pc(env, "worker", "--processes", "2", "--max-visits", "30", "--concurrency", "3", timeout=120)
    s = pcj(env, "status")
    assert (s["cooling"], s["ready"], s["visits_last_hour"]) == (30, 10, 30), s  # 15 + 15, not 30 each
    w = subprocess.Popen(PEERCRAWL + ["worker", "--processes", "2", "--until-idle", "--concurrency", "3"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # both processes run, each with its own heartbeat
        wait_for(lambda: len(children(w.pid)) == 2, 20, "two worker processes")
        _, err = w.communicate(timeout=120)
    finally:
        if w.poll() is None:
            w.kill()
    assert w.returncode == 0, err[-2000:]
    s = pcj(env, "status")
    assert (s["cooling"], s["ready"], s["in_flight"], s["visits_last_hour"]) == (40, 0, 0, 40), s
    torrents = counter(env, "torrents")
    for ih, ips in announced.items():
        assert torrents[f"torrents.{ih}.users"] == len(ips)
    assert counter(env, "countries") == {"countries.Germany.users": len(set().union(*announced.values()))}


def test_sigterm_drains_every_process_within_its_shutdown_time_and_hands_back(env):
    # The children drain within PEERCRAWL_SHUTDOWN_SECONDS as a lone worker does (test_worker_e2e shows
    # the default 25 s); 5 s here keeps the test short, and the supervisor's own kill comes 5 s later.
    def two_on_one_machine() -> None:
        s = pcj(env, "status")
        assert len(s["workers"]) == 2 and [m["processes"] for m in s["machines"]] == [2]
        assert "workers, by machine" in pc(env, "status").stdout

    code, took, err = sigterm_while_visits_wait(env, "procterm", 8, ["--processes", "2", "--concurrency", "4"],
                                                two_on_one_machine, start_within=30, exit_within=40,
                                                PEERCRAWL_SCRAPE="off", PEERCRAWL_SHUTDOWN_SECONDS="5")
    assert code == 0 and took < 5 + 3, (code, took, err[-2000:])  # drained, not killed at 10 s
    s = pcj(env, "status")
    assert (s["in_flight"], s["ready"], s["workers"]) == (0, 8, []), s


def test_a_process_killed_mid_visit_is_started_again_and_its_leases_come_back(env, opentracker):  # noqa: F811
    hashes = [h(f"prockill{i}") for i in range(20)]
    ot = opentracker(hashes)
    announced = {ih: announce(ot, ih, 2, 3 * i) for i, ih in enumerate(hashes)}
    env.update(PEERCRAWL_TRACKERS=ot.udp_url, PEERCRAWL_REVISIT_SECONDS="1", PEERCRAWL_LEASE_SECONDS="2")
    pcj(env, "add", *hashes)
    w = subprocess.Popen(PEERCRAWL + ["worker", "--processes", "2", "--concurrency", "2", "--duration", "10"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def two(without: int = 0) -> set[int] | None:
            c = children(w.pid)
            return c if len(c) == 2 and without not in c else None

        first = wait_for(two, 20, "two worker processes")
        wait_for(lambda: pcj(env, "status")["visits_last_hour"] > 0, 20, "visits")
        victim = min(first)
        subprocess.run(["kill", "-9", str(victim)], check=True)
        # started again after its first pause (1 s): two children, one of them new
        again = wait_for(lambda: two(victim), 15, "the killed process started again")
        assert len(again - first) == 1
        _, err = w.communicate(timeout=60)
    finally:
        if w.poll() is None:
            w.kill()
    assert w.returncode == 0, err[-2000:]
    assert err.count("worker_child_died") == 1 and "signal 9" in err
    # the killed process's leases expire and a fresh worker takes them: every torrent counted exactly
    time.sleep(2.1)
    env["PEERCRAWL_REVISIT_SECONDS"] = "3600"
    pc(env, "worker", "--until-idle", "--concurrency", "4", timeout=60)
    s = pcj(env, "status")
    assert (s["tracked"], s["in_flight"], s["ready"]) == (20, 0, 0), s
    torrents = counter(env, "torrents")
    for ih, ips in announced.items():
        assert torrents[f"torrents.{ih}.users"] == len(ips)


def test_processes_that_keep_dying_stop_the_supervisor_with_an_error(capsys):
    import sys

    from workers.supervisor import DEATHS_LIMIT, Supervisor

    dies = [sys.executable, "-c", "import sys; sys.exit(3)"]
    sleeps = [sys.executable, "-c", "import time; time.sleep(60)"]
    sup = Supervisor([dies, dies, sleeps], shutdown=5.0)
    t0 = time.monotonic()
    assert sup.run() == 1
    # deaths at 0, 0, 1, 1 and 3 s (pauses of 1 then 2 s): the fifth stops every process, the sleeper too
    assert time.monotonic() - t0 < 15 and len(sup.deaths) == DEATHS_LIMIT
    assert all(c is None or c.poll() is not None for c in sup.children)
