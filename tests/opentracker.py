"""A real opentracker on loopback for tests and benchmarks.

Debian's opentracker is built with a whitelist: only listed info-hashes are
tracked (others get "not authorized"), and the list is read after it chroots
into its root directory, so the file lives there and is named relative to it.
It refuses to run as root unless given ``-u nobody``, which then needs to read
that directory.

Usage in a test module::

    from tests.opentracker import OpenTracker, opentracker  # noqa: F401 (fixture)

    def test_x(opentracker):
        ot = opentracker(["<40 hex>", ...])
        ot.announce_from("127.0.0.2", "<40 hex>", 6881, left=0)
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

import pytest

from crawler.sources.trackers import udp_codec

BINARY = "/usr/bin/opentracker"


def free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port")


class OpenTracker:
    """One opentracker process on 127.0.0.1:``port`` (TCP and UDP) tracking ``info_hashes``."""

    def __init__(self, rootdir: Path, info_hashes, port: int = 0):
        self.rootdir = Path(rootdir)
        self.info_hashes = [h.lower() for h in info_hashes]
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def udp_url(self) -> str:
        return f"udp://127.0.0.1:{self.port}/announce"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/announce"

    def start(self, timeout: float = 5.0) -> OpenTracker:
        """Start and wait until it answers a UDP connect; raises RuntimeError if it does not."""
        self.rootdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.rootdir, 0o755)
        wl = self.rootdir / "whitelist"
        wl.write_text("".join(h + "\n" for h in self.info_hashes))
        os.chmod(wl, 0o644)
        # Its statistics page answers only addresses the configuration lets in.
        conf = self.rootdir / "opentracker.conf"
        conf.write_text("access.stats 127.0.0.1\n")
        os.chmod(conf, 0o644)
        self.proc = subprocess.Popen(
            [BINARY, "-f", str(conf), "-i", "127.0.0.1", "-p", str(self.port), "-P", str(self.port),
             "-u", "nobody", "-d", str(self.rootdir), "-w", "whitelist"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"opentracker exited with {self.proc.returncode}")
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.settimeout(0.2)
                    s.sendto(udp_codec.connect_request(1), ("127.0.0.1", self.port))
                    s.recv(64)
                # The whitelist loads in a thread shortly after start.
                if not self.info_hashes or self._tracked(self.info_hashes[0]):
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("opentracker did not come up")

    def _tracked(self, info_hash_hex: str) -> bool:
        # A "stopped" announce is answered in full even before the whitelist
        # is loaded; only a "started" one tells. Withdraw the probe at once.
        try:
            self.announce_from("127.0.0.1", info_hash_hex, 1, event=udp_codec.EVENT_STARTED)
        except udp_codec.UdpPacketError:
            return False
        self.announce_from("127.0.0.1", info_hash_hex, 1, event=udp_codec.EVENT_STOPPED)
        return True

    def udp_announces(self) -> int:
        """UDP announces received so far (``stopped`` ones included), from its statistics page."""
        import re
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats?mode=everything", timeout=5) as r:
            page = r.read().decode()
        udp = re.search(r"<udp>(.*?)</udp>", page, re.S)
        return int(re.search(r"<announce>(\d+)</announce>", udp.group(1)).group(1))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def announce_from(
        self, src_ip: str, info_hash_hex: str, port: int, left: int = 1,
        event: int = udp_codec.EVENT_STARTED, num_want: int = 200, timeout: float = 2.0,
    ) -> udp_codec.AnnounceReply:
        """Announce over UDP from source address ``src_ip`` (any 127.x.y.z) as a test peer.

        ``left=0`` announces a seeder. Raises OSError on timeout, UdpPacketError
        if the tracker refuses (e.g. the hash is not whitelisted).
        """
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((src_ip, 0))
            s.settimeout(timeout)
            dest = ("127.0.0.1", self.port)
            s.sendto(udp_codec.connect_request(11), dest)
            conn = udp_codec.parse_reply(s.recv(64))
            req = udp_codec.AnnounceRequest(
                conn.connection_id, 12, bytes.fromhex(info_hash_hex), os.urandom(20), port,
                num_want, event, left=left,
            )
            s.sendto(req.encode(), dest)
            reply = udp_codec.parse_reply(s.recv(65536))
            if not isinstance(reply, udp_codec.AnnounceReply):
                raise udp_codec.UdpPacketError(f"unexpected reply {reply!r}")
            return reply

    def announce_many(self, src_ip: str, info_hashes, port: int, left: int = 1, batch: int = 32) -> None:
        """Announce one test peer (``src_ip``:``port``) into every torrent of ``info_hashes``.

        One connection id, announces sent ``batch`` at a time before their
        replies are read: how benchmarks fill thousands of swarms quickly.
        """
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((src_ip, 0))
            s.settimeout(2)
            dest = ("127.0.0.1", self.port)
            s.sendto(udp_codec.connect_request(1), dest)
            cid = udp_codec.parse_reply(s.recv(64)).connection_id
            for start in range(0, len(info_hashes), batch):
                part = info_hashes[start : start + batch]
                for n, h in enumerate(part):
                    req = udp_codec.AnnounceRequest(cid, n, bytes.fromhex(h), os.urandom(20), port, 0,
                                                    udp_codec.EVENT_STARTED, left=left)
                    s.sendto(req.encode(), dest)
                for _ in part:
                    s.recv(2048)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def peer_address(i: int) -> str:
    """A distinct loopback address for test peer ``i`` (127.1.x.y, never 127.0.0.1)."""
    return f"127.1.{(i // 250) % 250}.{i % 250 + 1}"


@pytest.fixture
def opentracker(tmp_path):
    """Factory: ``opentracker(info_hashes)`` starts one; all are stopped after the test."""
    started: list[OpenTracker] = []

    def start(info_hashes, port: int = 0) -> OpenTracker:
        ot = OpenTracker(tmp_path / f"ot{len(started)}", info_hashes, port).start()
        started.append(ot)
        return ot

    yield start
    for ot in started:
        ot.stop()
