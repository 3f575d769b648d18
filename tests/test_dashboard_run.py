"""``peercrawl run`` serves the dashboard beside its workers, on the same event loop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def test_run_serves_the_dashboard_while_it_crawls(test_env):
    p = subprocess.Popen([sys.executable, "-m", "crawler", "run", "--duration", "20", "--concurrency", "3",
                          "--dashboard-port", "0"], env=test_env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read():
        for line in p.stderr:
            m = re.search(r"dashboard at (http://\S+)", line)
            if m:
                found.append(m.group(1))
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(30), "run printed no dashboard address"
        base = found[0]
        workers: list = []
        end = time.monotonic() + 15
        while not workers and time.monotonic() < end:
            with urllib.request.urlopen(base + "api/operators", timeout=5) as r:
                workers = json.load(r)["tables"]["workers"]
            time.sleep(0.3)
        assert [w["concurrency"] for w in workers] == [3]  # run's own worker, seen through its own dashboard
        with urllib.request.urlopen(base + "metrics", timeout=5) as r:
            families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
        assert families["peercrawl_workers"].samples[0].value == 1
    finally:
        p.terminate()
        assert p.wait(30) == 0
