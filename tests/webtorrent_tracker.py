"""WebTorrent's ``bittorrent-tracker`` (the npm package) on loopback, its HTTP and UDP faces.

The package lives in ``tests/node`` (``package.json``, ``package-lock.json``);
``.ci/run`` installs it there with ``npm ci``. ``tests/node/webtorrent_tracker.mjs``
starts its ``Server`` and prints the ports it listens on; the process stops
when its standard input closes, so a test that dies leaves no tracker behind.

Usage in a test module::

    from tests.webtorrent_tracker import webtorrent_tracker  # noqa: F401 (fixture)

    def test_x(webtorrent_tracker):
        wt = webtorrent_tracker()
        wt.announce_from("127.1.0.1", "<40 hex>", 6881, left=0)
        wt.http_url, wt.udp_url
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Self

import pytest

from crawler.sources.trackers import udp_codec
from tests.node_process import NodeProcess, installed_version

NODE_DIR = Path(__file__).resolve().parent / "node"
SCRIPT = NODE_DIR / "webtorrent_tracker.mjs"
PACKAGE = NODE_DIR / "node_modules" / "bittorrent-tracker" / "package.json"


class WebTorrentTracker:
    """One ``bittorrent-tracker`` process on 127.0.0.1 (HTTP and UDP), its output in ``log``."""

    def __init__(self, log: Path):
        self.node = NodeProcess("bittorrent-tracker", "webtorrent_tracker.mjs", [], log)
        self.http_port = self.udp_port = 0

    @property
    def log(self) -> Path:
        return self.node.log

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/announce"

    @property
    def udp_url(self) -> str:
        return f"udp://127.0.0.1:{self.udp_port}/announce"

    @staticmethod
    def version() -> str:
        """The installed package's version; raises RuntimeError naming the fix when it is missing."""
        return installed_version("bittorrent-tracker")

    def start(self, timeout: float = 30.0) -> WebTorrentTracker:
        """Start it and wait for its ports; raises RuntimeError if it does not come up."""
        self.node.start()
        try:
            ports = self.node.line(timeout, "did not come up")
        except RuntimeError:
            self.stop()
            raise
        self.http_port, self.udp_port = ports["http"], ports["udp"]
        return self

    def stop(self) -> None:
        """Close its standard input (it stops itself), then terminate it if it lingers."""
        self.node.stop()

    def announce_from(self, src_ip: str, info_hash_hex: str, port: int, left: int = 1,
                      event: int = udp_codec.EVENT_STARTED, timeout: float = 5.0) -> udp_codec.AnnounceReply:
        """Announce over its UDP face from ``src_ip`` (any 127.x.y.z) as a test peer; ``left=0``: a seeder.

        It keys a swarm's peers by address and port, so each test peer gets its own. Raises
        OSError on timeout, UdpPacketError when the reply is not an announce reply.
        """
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((src_ip, 0))
            s.settimeout(timeout)
            dest = ("127.0.0.1", self.udp_port)
            s.sendto(udp_codec.connect_request(21), dest)
            conn = udp_codec.parse_reply(s.recv(64))
            if not isinstance(conn, udp_codec.ConnectReply):
                raise udp_codec.UdpPacketError(f"unexpected reply {conn!r}")
            req = udp_codec.AnnounceRequest(conn.connection_id, 22, bytes.fromhex(info_hash_hex), os.urandom(20),
                                            port, 50, event, left=left)
            s.sendto(req.encode(), dest)
            reply = udp_codec.parse_reply(s.recv(65536))
            if not isinstance(reply, udp_codec.AnnounceReply):
                raise udp_codec.UdpPacketError(f"unexpected reply {reply!r}")
            return reply

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture
def webtorrent_tracker(tmp_path):
    """Factory: ``webtorrent_tracker()`` starts one; all are stopped after the test."""
    started: list[WebTorrentTracker] = []

    def start() -> WebTorrentTracker:
        wt = WebTorrentTracker(tmp_path / f"webtorrent{len(started)}.log").start()
        started.append(wt)
        return wt

    yield start
    for wt in started:
        wt.stop()
