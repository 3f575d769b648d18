"""``peercrawl run`` (one machine, two commands) and the Procfile under a Procfile runner."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from crawler.settings import Settings
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _env(test_env):
    e = dict(test_env)
    e["PYTHONPATH"] = str(ROOT)
    e["PATH"] = str(BIN) + os.pathsep + e.get("PATH", "")
    return e


def test_run_crawls_a_magnet_link_and_reports(test_env, opentracker):  # noqa: F811 (fixtures)
    ih = hashlib.sha1(b"run-magnet").hexdigest()
    ot = opentracker([ih])
    for i in range(4):
        ot.announce_from(peer_address(i), ih, 6881)
    env = _env(test_env)
    magnet = f"magnet:?xt=urn:btih:{ih}&tr={ot.udp_url}"
    r = subprocess.run([str(BIN / "peercrawl"), "run", magnet, "not-an-item", "--until-idle", "--dashboard-port", "0"],
                       env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1, r.stderr[-2000:]  # the bad item is reported; the good one was crawled
    assert "argument 2" in r.stderr
    assert re.search(r"peercrawl run: dashboard at http://127\.0\.0\.1:\d+/", r.stderr), r.stderr[-2000:]
    assert "1 visit (0 failed), 4 peers found" in r.stdout
    assert "next: peercrawl stats countries" in r.stdout
    t = json.loads(subprocess.run([str(BIN / "peercrawl"), "torrent", ih, "--json"], env=env,
                                  capture_output=True, text=True, timeout=30, check=False).stdout)
    assert (t["visits"], t["peers_last_visit"], t["state"]) == (1, 4, "cooling")


def test_run_reports_any_bad_item_and_trackers_past_the_cap_as_add_does(test_env, tmp_path):
    # run admits through add's own path: a .torrent that breaks the bencode
    # parser is one line, and trackers past the per-torrent bound are reported.
    env = _env(test_env)
    env["PEERCRAWL_MAX_TRACKERS_PER_TORRENT"] = "2"
    big = tmp_path / "big_int.torrent"
    big.write_bytes(b"d4:infod6:lengthi" + b"9" * 5000 + b"eee")
    ih = hashlib.sha1(b"run-capped").hexdigest()
    magnet = f"magnet:?xt=urn:btih:{ih}" + "".join(f"&tr=udp://127.0.0.1:{1000 + i}/announce" for i in range(5))
    r = subprocess.run([str(BIN / "peercrawl"), "run", str(big), magnet, "--duration", "1"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"peercrawl run: argument 1: {big} is not valid bencode" in r.stderr
    assert "peercrawl run: 3 trackers not stored on 1 torrent" in r.stderr
    assert "Traceback" not in r.stderr
    t = json.loads(subprocess.run([str(BIN / "peercrawl"), "torrent", ih, "--json"], env=env,
                                  capture_output=True, text=True, timeout=30, check=False).stdout)
    assert len(t["trackers"]) == 2


def test_procfile_worker_runs_under_honcho(test_env):
    env = _env(test_env)
    p = subprocess.Popen([str(BIN / "honcho"), "-f", str(ROOT / "Procfile"), "start", "worker"], env=env,
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        end = time.monotonic() + 20
        workers = []
        while not workers and time.monotonic() < end:
            time.sleep(0.5)
            out = subprocess.run([str(BIN / "peercrawl"), "status", "--json"], env=env, capture_output=True,
                                 text=True, timeout=30, check=False).stdout
            workers = json.loads(out)["workers"]
        # its pool sized by auto, the default: from 8 runners, shrinking while nothing is due
        assert len(workers) == 1 and workers[0]["auto"] is True
        assert Settings().concurrency_min <= workers[0]["concurrency"] <= 8
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    assert "worker_stopped" in out


def test_run_offline_says_why_its_visits_failed_and_waits_the_dht_once(test_env):
    """No tracker resolves and the DHT never bootstraps (its router is a closed loopback port): the
    summary names both reasons and where to look, and only the first lookup waits its whole deadline."""
    env = _env(test_env)
    env.update(PEERCRAWL_DHT="on", PEERCRAWL_DHT_BOOTSTRAP="127.0.0.1:9", PEERCRAWL_DHT_LISTEN="127.0.0.1:0",
               PEERCRAWL_DHT_TIMEOUT="10", PEERCRAWL_DHT_SCRAPE="off")
    magnets = [f"magnet:?xt=urn:btih:{hashlib.sha1(str(i).encode()).hexdigest()}"
               "&tr=udp%3A%2F%2Ftracker.invalid%3A1337%2Fannounce" for i in range(4)]
    start = time.monotonic()
    r = subprocess.run([str(BIN / "peercrawl"), "run", *magnets, "--until-idle", "--concurrency", "1",
                        "--no-dashboard"], env=env, capture_output=True, text=True, timeout=120, check=False)
    took = time.monotonic() - start
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.splitlines()
    assert out[0].startswith("4 visits (4 failed), 0 peers found"), r.stdout
    assert re.fullmatch(r"  [1-4] visits? failed: .*tracker\.invalid.*DHT not bootstrapped.*", out[1]), r.stdout
    assert out[-1] == "no visit was answered: peercrawl torrent HASH says what each source said"
    assert r.stdout.count("visits (4 failed)") == 1  # the summary once, on stdout
    # four lookups one after another: 10 s for the first, about a second for each of the others (40 s before)
    assert took < 30, took
