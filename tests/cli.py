"""Running the real ``peercrawl`` command in a subprocess, as users do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def run(env: dict, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        env=env, input=stdin, capture_output=True, text=True, timeout=timeout,
    )


def run_json(env: dict, *args: str, **kw):
    p = run(env, *args, "--json", **kw)
    assert p.stdout, p.stderr
    return p, json.loads(p.stdout)


def torrent_infos(env: dict, hashes) -> dict[str, dict | None]:
    """What ``peercrawl torrent H --json`` prints for each of ``hashes`` (None: not tracked), read in this
    process as the command reads it (``QueueView.torrent``, then ``shown``) through one connection.

    For tests that check many torrents after a crawl: a command per torrent starts an interpreter
    for each, about a second apiece, and the command itself is tested in its own tests.
    """
    from crawler.queue.torrent_record import shown
    from crawler.queue.view import QueueView
    from crawler.settings import Settings
    from crawler.store import connect, layout

    settings = Settings.from_env(env)
    client = connect.connect(settings)
    try:
        view = QueueView(client, layout.resolve(client, settings.namespace, settings.queue_shards))
        defaults = tuple(t.url for t in settings.trackers)
        out = {}
        for h in hashes:
            info = view.torrent(h, time.time(), defaults)
            # through JSON, as the command prints it: lists for tuples, strings for keys
            out[h] = None if info is None else json.loads(json.dumps(shown(info)))
        return out
    finally:
        client.close()


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


def on_terminal(env: dict, *args: str, timeout: float = 60, size: tuple[int, int] | None = None,
                stderr_too: bool = False) -> str:
    """What ``peercrawl ARGS`` printed on a pseudo-terminal.

    ``size``: the terminal's (rows, columns), else the pty's default.
    ``stderr_too``: stderr goes to the terminal as well (a picture of the
    whole screen) and the exit code is not checked; otherwise stderr is
    piped and the command must exit 0 (its stderr is the failure's message).
    """
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    if size is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "crawler", *args], env=env, stdout=slave,
                         stderr=slave if stderr_too else subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(slave)
    out = bytearray()
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            # select, not a bare read: under gevent's patching it yields while it waits
            if not select.select([master], [], [], 0.5)[0]:
                if stderr_too and p.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        if p.poll() is None and (stderr_too or time.monotonic() >= end):
            p.kill()
    if stderr_too:
        p.wait(30)
        return out.decode("utf-8", "replace").replace("\r\n", "\n")
    err = p.stderr.read().decode()
    assert p.wait(timeout) == 0, err
    return out.decode().replace("\r\n", "\n")
