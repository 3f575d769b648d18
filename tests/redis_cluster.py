"""A real Redis Cluster on loopback: three masters and three replicas.

Six ``redis-server --cluster-enabled yes`` processes (Debian's redis-server,
which ``.ci/run`` installs) on free ports in a temporary directory, joined by
``redis-cli --cluster create --cluster-replicas 1``. The fixture is per
session (creating a cluster takes a few seconds); tests keep to their own
namespaces as on the single Redis. ``kill(port)`` and ``restart(port)`` stop
and bring back one node, for failover tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis

from tests.redis_servers import server_binary

MASTERS = 3
NODES = 2 * MASTERS


def _free_ports(n: int) -> list[int]:
    """``n`` ports free now, with their cluster bus ports (+10000) free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        taken = set(ports) | {p + 10000 for p in ports}
        # a node's cluster bus listens on port + 10000: neither may be another node's port or bus
        if port + 10000 > 65535 or port in taken or port + 10000 in taken:
            continue
        try:
            with socket.socket() as bus:
                bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    return ports


class RedisCluster:
    """Six nodes on loopback; ``urls`` one per node, ``masters()`` the current masters."""

    def __init__(self, root: Path):
        self.root = root
        self.ports = _free_ports(NODES)
        self.procs: dict[int, subprocess.Popen] = {}
        for port in self.ports:
            self._start(port)
        for port in self.ports:
            self._wait_answers(port)
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, capture_output=True, timeout=60)
        self.wait_healthy(replicated=True)

    def _start(self, port: int) -> None:
        d = self.root / str(port)
        d.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            [server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--dir", str(d),
             "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _wait_answers(self, port: int, seconds: float = 20.0) -> None:
        end = time.monotonic() + seconds
        while True:
            try:
                redis.Redis(port=port, socket_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)

    def url(self, port: int) -> str:
        """The ``redis://`` URL of the node on ``port``."""
        return f"redis://127.0.0.1:{port}/0"

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (no redirections followed)."""
        return redis.Redis(port=port, socket_timeout=5)

    def masters(self) -> list[int]:
        """Ports of the nodes that are masters now, as the live nodes see it."""
        out = set()
        for port in self.live():
            try:
                for line in self.node(port).execute_command("CLUSTER", "NODES").decode().splitlines():
                    f = line.split()
                    flags = f[2].split(",")
                    if "master" in flags and "fail" not in flags and f[7] == "connected":
                        out.add(int(f[1].split("@")[0].rsplit(":", 1)[1]))
                return sorted(out)
            except redis.RedisError:
                continue
        return []

    def owner(self, key: str) -> int:
        """Port of the master that serves ``key``'s slot now."""
        return self.serving(key)[0]

    def serving(self, key: str) -> list[int]:
        """Ports of the nodes that hold ``key``'s slot now: its master first, then its replicas."""
        any_node = self.node(self.live()[0])
        slot = any_node.execute_command("CLUSTER", "KEYSLOT", key)
        for start, end, *nodes in any_node.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return [int(n[1]) for n in nodes]
        raise LookupError(slot)

    def live(self) -> list[int]:
        """Ports whose process is running."""
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def wait_healthy(self, seconds: float = 60.0, replicated: bool = False) -> None:
        """Until every live node says ``cluster_state:ok``, every slot is served, three
        connected masters are up (a killed master's replica promoted) and, with
        ``replicated``, every slot range lists a replica."""
        end = time.monotonic() + seconds
        while True:
            try:
                infos = [self.node(p).execute_command("CLUSTER", "INFO").decode() for p in self.live()]
                views = [self.node(p).execute_command("CLUSTER", "SLOTS") for p in self.live()] if replicated else []
                if all("cluster_state:ok" in i and "cluster_slots_ok:16384" in i for i in infos) and all(
                        len(r) >= 4 for slots in views for r in slots) and len(self.masters()) == MASTERS:
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > end:
                raise TimeoutError("the cluster did not become healthy")
            time.sleep(0.1)

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (its replica takes over after the node timeout)."""
        self.procs[port].kill()
        self.procs[port].wait()

    def restart(self, port: int) -> None:
        """Start the node on ``port`` again from its files (it rejoins, as a replica if replaced)."""
        self._start(port)
        self._wait_answers(port)

    def close(self) -> None:
        """Stop every node."""
        stop(self.procs.values())


def stop(procs) -> None:
    """SIGKILL every server process of ``procs`` still running, then reap them all."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def available() -> bool:
    """Whether redis-server and redis-cli are installed (``.ci/run`` installs them)."""
    return bool(shutil.which("redis-server") and shutil.which("redis-cli"))


@pytest.fixture(scope="session")
def redis_cluster():
    """The session's cluster (the tests that use it fail, not skip, without redis-server)."""
    assert available(), "redis-server and redis-cli are needed: .ci/run installs Debian's redis-server and redis-tools"
    root = Path(tempfile.mkdtemp(prefix="peercrawl-cluster-"))
    cluster = RedisCluster(root)
    yield cluster
    cluster.close()
    if not os.environ.get("PEERCRAWL_KEEP_CLUSTER"):
        shutil.rmtree(root, ignore_errors=True)
