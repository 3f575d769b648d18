"""Tracker health reaches Redis while a crawl runs, and status says why a tracker does not answer."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.cli import run, run_json
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)


def _status_until(env: dict, ok, within: float = 30.0) -> dict:
    end = time.monotonic() + within
    while True:
        _, s = run_json(env, "status")
        if ok(s) or time.monotonic() > end:
            return s
        time.sleep(0.5)


def test_an_answering_tracker_shows_in_status_while_the_worker_runs(opentracker, test_env):
    h = "7a" * 20
    ot = opentracker([h])
    ot.announce_from(peer_address(1), h, 6881)
    assert run(test_env, "add", f"magnet:?xt=urn:btih:{h}&tr={ot.udp_url}").returncode == 0
    w = subprocess.Popen([sys.executable, "-m", "crawler", "worker", "--duration", "120"], env=test_env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = _status_until(test_env, lambda s: ot.udp_url in s["trackers"])
        assert w.poll() is None, "the worker is still crawling"
        assert s["trackers"][ot.udp_url]["answers"] >= 1, s["trackers"]
    finally:
        w.terminate()
        w.wait(60)


def test_status_says_why_trackers_do_not_answer(test_env):
    """One tracker the address policy refuses (loopback without PEERCRAWL_ALLOW_PRIVATE), one that
    never answers (a closed port on a public-looking name that does not resolve)."""
    env = dict(test_env, PEERCRAWL_ALLOW_PRIVATE="0")
    blocked, dead = "udp://127.0.0.1:9/announce", "udp://tracker.invalid:1337/announce"
    assert run(env, "add", "7b" * 20, "--tracker", blocked, "--tracker", dead).returncode == 0
    w = run(env, "worker", "--until-idle", timeout=120)
    assert w.returncode == 0, w.stderr
    p, s = run_json(env, "status")
    t = s["trackers"]
    assert t[blocked]["blocked"] == 1 and "PEERCRAWL_ALLOW_PRIVATE=1" in t[blocked]["last_blocked"]
    assert t[blocked]["failures"] == 0 and not t[blocked]["backing_off"]
    assert t[dead]["failing"] and "cannot resolve 'tracker.invalid'" in t[dead]["last_failure"]
    text = run(env, "status").stdout
    lines = [x for x in text.splitlines() if x.startswith("udp://")]
    assert any(x.startswith(f"{blocked} refused by the address policy: ") and "PEERCRAWL_ALLOW_PRIVATE=1" in x
               for x in lines), text
    assert any(x.startswith(f"{dead} failing: HostUnresolved") for x in lines), text
    assert json.loads(run(env, "status", "--json").stdout)["trackers"] == t
