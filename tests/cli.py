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
