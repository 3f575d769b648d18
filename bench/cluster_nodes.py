"""Redis topologies for benchmarks: one plain redis-server, or a cluster of any number of masters.

Debian's ``redis-server`` on free loopback ports, each in its own directory
under a temporary root, persistence off (``--save "" --appendonly no``: a
benchmark measures the crawl's own work, not fsyncs), ``noeviction`` as in
production. A cluster has masters only, no replicas: ``redis-cli --cluster
create`` refuses fewer than three masters, so the nodes are joined with
CLUSTER MEET and each master is given one equal, contiguous slot range with
CLUSTER ADDSLOTSRANGE, the ranges ``create`` would give (and the ones
``shard_layout.shard_tag`` spreads shards over). tests/redis_cluster.py is the
suite's fixed three-masters-three-replicas cluster; this is the benchmarks'.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

from tests.redis_cluster import _free_ports, stop
from tests.redis_servers import server_binary

START_SECONDS = 20.0
HEALTHY_SECONDS = 60.0


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """The inclusive slot range of each of ``masters`` masters: equal parts, in order."""
    n = REDIS_CLUSTER_HASH_SLOTS
    return [(i * n // masters, (i + 1) * n // masters - 1) for i in range(masters)]


class Topology:
    """Redis servers on loopback: ``masters`` None is one plain server, else a cluster of that many.

    ``url`` names the first node (any node serves a cluster client);
    ``nodes`` maps each port to a plain client of that node (no redirections
    followed), for INFO and SCAN of one node. ``wrap``: a command each server
    runs under (``valgrind --tool=callgrind ...``: ``shutdown`` then lets it
    write what it gathered).
    """

    def __init__(self, masters: int | None, cpus: set[int] | None = None, wrap: tuple[str, ...] = ()):
        self.masters, self.cpus, self.wrap = masters, cpus, wrap
        self.root = Path(tempfile.mkdtemp(prefix="bench-topology-"))
        self.ports = _free_ports(masters or 1)
        self.procs: dict[int, subprocess.Popen] = {}
        try:
            for port in self.ports:
                self._start(port)
            for port in self.ports:
                self._wait_answers(port)
            if masters:
                self._join()
        except BaseException:
            self.close()
            raise
        self.nodes = {p: redis.Redis(port=p, socket_timeout=30) for p in self.ports}

    @property
    def name(self) -> str:
        """``single`` or ``cluster-<n>``."""
        return "single" if self.masters is None else f"cluster-{self.masters}"

    @property
    def url(self) -> str:
        """The ``redis://`` URL of the first node."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def _start(self, port: int) -> None:
        d = self.root / str(port)
        d.mkdir()
        cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", "5000"] if self.masters else []
        self.procs[port] = subprocess.Popen(
            [*self.wrap, server_binary(), "--port", str(port), "--bind", "127.0.0.1", *cluster, "--dir", str(d),
             "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.cpus:
            os.sched_setaffinity(self.procs[port].pid, self.cpus)

    def _wait_answers(self, port: int) -> None:
        end = time.monotonic() + START_SECONDS
        while True:
            try:
                redis.Redis(port=port, socket_timeout=1).ping()
                return
            except redis.RedisError as e:
                if self.procs[port].poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"redis-server on port {port} did not start; see {self.root / str(port)}") from e
                time.sleep(0.05)

    def _join(self) -> None:
        """MEET every node to the first, one slot range each, then wait for every node to agree."""
        first = redis.Redis(port=self.ports[0], socket_timeout=5)
        for port in self.ports[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        for port, (low, high) in zip(self.ports, slot_ranges(len(self.ports)), strict=True):
            redis.Redis(port=port, socket_timeout=5).execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        """Until every node says ``cluster_state:ok`` and lists every master with its range."""
        end = time.monotonic() + HEALTHY_SECONDS
        want = sorted((low, high, port) for port, (low, high) in zip(self.ports, slot_ranges(len(self.ports)),
                                                                     strict=True))
        while True:
            try:
                if all(self._sees(port, want) for port in self.ports):
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > end:
                raise RuntimeError(f"the {self.name} cluster did not become healthy; see {self.root}")
            time.sleep(0.1)

    @staticmethod
    def _sees(port: int, want: list[tuple[int, int, int]]) -> bool:
        c = redis.Redis(port=port, socket_timeout=5)
        if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO").decode():
            return False
        got = sorted((r[0], r[1], int(r[2][1])) for r in c.execute_command("CLUSTER", "SLOTS"))
        return got == want

    def owner(self, slot: int) -> int:
        """The port of the node serving ``slot`` (the one node of a single server)."""
        if not self.masters:
            return self.ports[0]
        for port, (low, high) in zip(self.ports, slot_ranges(len(self.ports)), strict=True):
            if low <= slot <= high:
                return port
        raise LookupError(slot)

    def shutdown(self) -> None:
        """SHUTDOWN NOSAVE every node and wait for it to exit by itself (``close`` kills)."""
        for port, node in self.nodes.items():
            try:
                node.shutdown(nosave=True)
            except redis.ConnectionError:
                pass  # it closes the connection as it goes
            self.procs[port].wait(120)

    def close(self) -> None:
        """Stop every node and remove its files."""
        stop(self.procs.values())
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
