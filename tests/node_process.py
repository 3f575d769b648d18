"""One script of ``tests/node`` run by Node.js: started, read line by line, stopped.

The npm packages the tests run (``bittorrent-tracker``, ``bittorrent-dht``)
live in ``tests/node``; ``.ci/run`` installs them there with ``npm ci``. A
script prints one JSON line per answer on its standard output, writes its
log to standard error (kept in a file), and stops itself when its standard
input closes, so a test that dies leaves no process behind.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import time
from pathlib import Path

NODE_DIR = Path(__file__).resolve().parent / "node"


def installed_version(package: str) -> str:
    """The version of npm ``package`` in ``tests/node``; raises RuntimeError naming the fix when it is missing."""
    if shutil.which("node") is None:
        raise RuntimeError("node is not installed: apt-get install nodejs npm (.ci/run does)")
    manifest = NODE_DIR / "node_modules" / package / "package.json"
    if not manifest.exists():
        raise RuntimeError(f"{package} is not installed in {NODE_DIR}: "
                           "run `npm ci --no-audit --no-fund --ignore-scripts` there (.ci/run does)")
    return json.loads(manifest.read_text())["version"]


class NodeProcess:
    """``node tests/node/<script> ARGS`` for ``package``'s tests, its standard error in ``log``."""

    def __init__(self, package: str, script: str, args: list[str], log: Path):
        self.package, self.script, self.args, self.log = package, script, list(args), Path(log)
        self.proc: subprocess.Popen | None = None
        self._buffer = b""

    def start(self) -> None:
        """Start it (the package must be installed: ``installed_version``)."""
        installed_version(self.package)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(["node", str(NODE_DIR / self.script), *self.args], cwd=NODE_DIR,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)

    def line(self, timeout: float, failing: str = "did not answer") -> dict:
        """Its next JSON line; RuntimeError (``failing``, with the log's tail) if none comes in ``timeout`` s."""
        end = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer and time.monotonic() < end:
                if sel.select(max(end - time.monotonic(), 0.0)):
                    chunk = os.read(self.proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    self._buffer += chunk
        if b"\n" not in self._buffer:
            raise RuntimeError(f"{self.package} {failing}: {self.log.read_text()[-500:]!r}")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, command: dict) -> None:
        """One JSON line to its standard input."""
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        """Close its standard input (it stops itself), then terminate it if it lingers."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for step in (lambda: proc.stdin.close(), proc.terminate, proc.kill):
            try:
                step()
                proc.wait(5)
                break
            except (subprocess.TimeoutExpired, OSError):
                continue
        proc.stdout.close()
