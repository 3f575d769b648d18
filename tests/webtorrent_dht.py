"""WebTorrent's ``bittorrent-dht`` (the npm package) on loopback: a small DHT that is not libtorrent's.

The package lives in ``tests/node`` beside ``bittorrent-tracker`` (``package.json``,
``package-lock.json``); ``.ci/run`` installs both there with ``npm ci``.
``tests/node/webtorrent_dht.mjs`` starts one node per address given, each on a
port of its own, and prints them; the process stops when its standard input
closes, so a test that dies leaves no node behind.

Why each node has an address of its own: a node stores an ``announce_peer``
under the address the query came from, so peers announced by nodes on
distinct addresses (127.1.x.1 here) are distinct peers, as on the Internet.
The nodes never bootstrap from the public routers (``bootstrap: false``):
each is put straight into every other's routing table, so the network is
complete the moment the process says so, and an announce reaches every other
node (fewer than k = 20 of them) before its reply comes back.

While it runs the process takes one JSON command a line on its standard input
and answers each with one JSON line: ``announce`` (nodes announce a hash,
each with a port), ``ping`` (a node pings an address) and ``stats`` (what
the nodes saw: queries by source address and method, the peers they
stored, their routing tables, and every warning or error they raised).
The script reads a few of the package's internals for ``stats`` (k-rpc's
``query`` event, the peer store's generations), hence the major-version
bound in ``package.json``.

Usage in a test module::

    from tests.webtorrent_dht import webtorrent_dht  # noqa: F401 (fixture)

    def test_x(webtorrent_dht):
        wd = webtorrent_dht(["127.1.40.1", "127.1.41.1", "127.1.42.1"])
        wd.announce("<40 hex>", [(0, 7000), (1, 7001)])  # node 0 announces port 7000, node 1 port 7001
        wd.endpoints  # [(ip, port), ...]: bootstrap nodes for the crawler
        wd.stats()["queries"]["127.0.26.1"]  # {"get_peers": n, "ro": n, ...}
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

import pytest

from tests.node_process import NodeProcess, installed_version


class WebTorrentDht:
    """One process of ``bittorrent-dht`` nodes, one per address of ``ips``, its output in ``log``."""

    def __init__(self, ips: list[str], log: Path):
        self.ips = list(ips)
        self.node = NodeProcess("bittorrent-dht", "webtorrent_dht.mjs", self.ips, log)
        self.endpoints: list[tuple[str, int]] = []
        self.node_ids: list[str] = []

    @property
    def log(self) -> Path:
        return self.node.log

    @staticmethod
    def version() -> str:
        """The installed package's version; raises RuntimeError naming the fix when it is missing."""
        return installed_version("bittorrent-dht")

    def start(self, timeout: float = 30.0) -> WebTorrentDht:
        """Start the nodes and wait until each knows every other; raises RuntimeError if they do not come up."""
        self.node.start()
        try:
            nodes = self._reply(timeout)["nodes"]
        except RuntimeError:
            self.stop()
            raise
        self.endpoints = [(ip, port) for ip, port, _ in nodes]
        self.node_ids = [node_id for _, _, node_id in nodes]
        return self

    def _reply(self, timeout: float) -> dict:
        """The process's next JSON line; RuntimeError (with the log's tail) if none comes in ``timeout`` s."""
        reply = self.node.line(timeout)
        if "error" in reply and len(reply) == 1:
            raise RuntimeError(f"bittorrent-dht: {reply['error']}")
        return reply

    def _ask(self, command: dict, timeout: float) -> dict:
        self.node.send(command)
        return self._reply(timeout)

    def announce(self, info_hash_hex: str, peers: list[tuple[int, int]], timeout: float = 20.0) -> set[tuple[str, int]]:
        """Each ``(node, port)`` of ``peers``: node ``node`` announces ``info_hash_hex`` with ``port`` (its own
        lookup, then ``announce_peer`` to the nodes it found). Returns the peers a lookup should then find,
        ``{(node's address, port)}``; raises RuntimeError when an announce reached no node."""
        reply = self._ask({"announce": info_hash_hex, "peers": [list(p) for p in peers]}, timeout)
        if not all(reply["stored"]) or any(reply["errors"]):
            raise RuntimeError(f"announce of {info_hash_hex} not stored: {reply}")
        return {(self.endpoints[node][0], port) for node, port in peers}

    def ping(self, address: tuple[str, int], node: int = 0, timeout: float = 10.0) -> bool:
        """Whether ``address`` answered a ping from node ``node`` (k-rpc gives up after some 2 s)."""
        return self._ask({"ping": list(address), "from": node}, timeout)["answered"]

    def stats(self, timeout: float = 10.0) -> dict:
        """What the nodes saw so far: ``queries`` (source ip -> {method: count, "ro": count, "scrape": count}: the
        queries of each method, and how many carried BEP 43's ``ro`` or BEP 33's ``scrape``), ``announces``
        (a dict per peer stored: node, info_hash, host, port), ``peers`` (per node: info-hash hex -> [[ip,
        port], ...]), ``tables`` (per node: [[ip, port], ...]) and ``problems`` (every warning or error)."""
        return self._ask({"stats": True}, timeout)

    def stop(self) -> None:
        """Close its standard input (it stops itself), then terminate it if it lingers."""
        self.node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture
def webtorrent_dht(tmp_path):
    """Factory: ``webtorrent_dht(ips)`` starts one process of nodes; all are stopped after the test."""
    started: list[WebTorrentDht] = []

    def start(ips: list[str]) -> WebTorrentDht:
        wd = WebTorrentDht(ips, tmp_path / f"webtorrent_dht{len(started)}.log").start()
        started.append(wd)
        return wd

    yield start
    for wd in started:
        wd.stop()
