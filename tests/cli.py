"""Running the real ``peercrawl`` command in a subprocess, as users do."""

from __future__ import annotations

import json
import subprocess
import sys


def run(env: dict, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        env=env, input=stdin, capture_output=True, text=True, timeout=timeout,
    )


def run_json(env: dict, *args: str, **kw):
    p = run(env, *args, "--json", **kw)
    assert p.stdout, p.stderr
    return p, json.loads(p.stdout)


def start_run(env: dict, *args: str, wait: float = 30) -> tuple[subprocess.Popen, str]:
    """``peercrawl run ARGS --dashboard-port 0`` in the background, and the dashboard's address (no final ``/``).

    stderr is read on a thread for the whole run, so its pipe never fills.
    The caller terminates the process.
    """
    import re
    import threading

    p = subprocess.Popen([sys.executable, "-m", "crawler", "run", *args, "--dashboard-port", "0"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read():
        for line in p.stderr:
            m = re.search(r"dashboard at (http://\S+?)/?$", line.strip())
            if m:
                found.append(m.group(1))
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(wait):
        p.kill()
        p.wait(30)
        raise AssertionError("run printed no dashboard address")
    return p, found[0]
