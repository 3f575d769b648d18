"""Other people's BitTorrent clients as seeders on loopback: Debian's transmission-daemon, qbittorrent-nox,
aria2c and rtorrent, for the interoperability tests (tests/test_real_clients.py).

Each client runs headless from a directory of its own, on its own loopback
address (a /24 of its own: libtorrent's DHT keeps one node per /24 in its
routing table and in a search), and is driven through its own remote
interface: transmission's JSON RPC, qBittorrent's Web API, aria2's JSON-RPC
and rtorrent's XML-RPC over SCGI. Nothing here waits a fixed time: a client
is ready when its remote interface answers, a torrent is seeding when the
client says so, and announced when the tracker's scrape counts it.

What each client does not do here, and why:

- transmission's DHT is off: its DHT (jech/dht) drops every packet from
  127.0.0.0/8 as martian, so on loopback it never has a node, and with
  none it would look up its public bootstrap routers by name. It is a
  tracker-only client here.
- qBittorrent 4.5's DHT bootstraps from five public routers written into
  it (no setting changes them): it runs in a mount namespace of its own
  whose /etc/resolv.conf names 127.0.0.1, where nothing answers, so the
  names resolve nowhere and nothing leaves the machine. Without the means
  to make one (``unshare --mount`` needs CAP_SYS_ADMIN), its DHT is off.
- No client maps ports, discovers local peers or fetches anything of its
  own (qBittorrent's peer-country database download is off).

``CLIENTS`` names them and ``KINDS`` maps each name to its launcher;
``tests/client_world.py`` puts them together with a real opentracker and a
few small torrents made by mktorrent.
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import xmlrpc.client
from functools import partial
from pathlib import Path

from workers.lifeline import set_death_signal

CLIENTS = ("transmission", "qbittorrent", "aria2", "rtorrent")
ADDRESSES = {"transmission": "127.0.11.1", "qbittorrent": "127.0.12.1", "aria2": "127.0.13.1",
             "rtorrent": "127.0.14.1"}


def free_port(ip: str) -> int:
    """A port free for both TCP and UDP on ``ip``."""
    for _ in range(100):
        with socket.socket() as t:
            t.bind((ip, 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind((ip, port))
                except OSError:
                    continue
            return port
    raise RuntimeError(f"no free port on {ip}")


def wait_for(what: str, check, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None,
             every: float = 0.05):
    """Call ``check()`` until it returns something true (returned) or raises nothing; raise ``RuntimeError``
    naming ``what`` when ``timeout`` s pass or ``proc`` exits (with ``log``'s tail)."""
    end = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited {proc.returncode}{tail(log)}")
        try:
            got = check()
            if got:
                return got
        except (OSError, ValueError, KeyError, xmlrpc.client.Error) as e:
            last = e
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not within {timeout:g}s (last error: {last}){tail(log)}")
        time.sleep(every)


def tail(log: Path | None, n: int = 1500) -> str:
    if log is None or not log.exists():
        return ""
    return "\n--- " + str(log) + " ---\n" + log.read_text(errors="replace")[-n:]


def can_unshare_mounts() -> bool:
    """Whether a process may be given a mount namespace of its own (and bind-mount a file in it)."""
    try:
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount --bind /dev/null /etc/resolv.conf"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


class Client:
    """One client process: ``start`` (returns at once), ``wait_ready``, ``add``, ``seeding``, ``uploaded``,
    ``stop``. ``port``: its peer port (TCP, and UDP for uTP and its DHT); ``dht``: whether its DHT runs."""

    name = ""
    uses_dht = False

    def __init__(self, root: Path, dht_nodes: list[tuple[str, int]] | None = None):
        self.ip = ADDRESSES[self.name]
        self.root = root / self.name
        self.root.mkdir(parents=True)
        self.data = self.root / "data"
        self.data.mkdir()
        self.port = free_port(self.ip)
        self.rpc_port = free_port("127.0.0.1")
        self.log = self.root / "log"
        self.proc: subprocess.Popen | None = None
        self.dht = self.uses_dht

    @property
    def endpoint(self) -> tuple[str, int]:
        return self.ip, self.port

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        # A session of its own (a Ctrl-C at the terminal reaches the tests, which stop it in order) and
        # SIGTERM when the test process ends, however it ends.
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, cwd=self.root,
                                         start_new_session=True, preexec_fn=partial(set_death_signal, signal.SIGTERM))

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_for(f"{self.name}'s remote interface", self.ready, timeout, self.proc, self.log)

    def ready(self) -> bool:
        raise NotImplementedError

    def add(self, torrent: bytes) -> None:
        """Seed ``torrent`` (its files are under ``self.data``)."""
        raise NotImplementedError

    def seeding(self) -> set[str]:
        """The info-hashes (hex) it has whole and seeds."""
        raise NotImplementedError

    def uploaded(self) -> int:
        """Payload bytes it has uploaded, by its own count."""
        raise NotImplementedError

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _http(url: str, data: bytes | None = None, headers: dict | None = None, timeout: float = 5.0):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


class Transmission(Client):
    """transmission-daemon 3.00: settings.json in its config directory, its JSON RPC on 127.0.0.1."""

    name = "transmission"

    def __init__(self, root: Path, dht_nodes=None):
        super().__init__(root, dht_nodes)
        self._session_id = ""
        settings = {
            "bind-address-ipv4": self.ip, "bind-address-ipv6": "::1", "peer-port": self.port,
            "peer-port-random-on-start": False, "rpc-bind-address": "127.0.0.1", "rpc-port": self.rpc_port,
            "rpc-authentication-required": False, "rpc-whitelist-enabled": False,
            "rpc-host-whitelist-enabled": False, "dht-enabled": False, "lpd-enabled": False, "pex-enabled": True,
            "port-forwarding-enabled": False, "utp-enabled": True, "blocklist-enabled": False,
            "download-dir": str(self.data), "incomplete-dir-enabled": False, "watch-dir-enabled": False,
            "ratio-limit-enabled": False, "idle-seeding-limit-enabled": False, "start-added-torrents": True,
            "message-level": 1,
        }
        (self.root / "settings.json").write_text(json.dumps(settings))

    def command(self) -> list[str]:
        return ["transmission-daemon", "--foreground", "--config-dir", str(self.root), "--logfile", str(self.log)]

    def rpc(self, method: str, **arguments) -> dict:
        url = f"http://127.0.0.1:{self.rpc_port}/transmission/rpc"
        body = json.dumps({"method": method, "arguments": arguments}).encode()
        for _ in range(2):
            try:
                reply = json.loads(_http(url, body, {"X-Transmission-Session-Id": self._session_id}))
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise
                self._session_id = e.headers["X-Transmission-Session-Id"]  # the CSRF handshake: once
                continue
            if reply.get("result") != "success":
                raise ValueError(f"transmission {method}: {reply.get('result')}")
            return reply["arguments"]
        raise OSError("transmission kept asking for a new session id")

    def ready(self) -> bool:
        return bool(self.rpc("session-get"))

    def add(self, torrent: bytes) -> None:
        self.rpc("torrent-add", metainfo=base64.b64encode(torrent).decode(), **{"download-dir": str(self.data)})

    def _torrents(self, *fields: str) -> list[dict]:
        return self.rpc("torrent-get", fields=["hashString", *fields])["torrents"]

    def seeding(self) -> set[str]:
        return {t["hashString"] for t in self._torrents("status", "percentDone")
                if t["status"] == 6 and t["percentDone"] == 1}

    def uploaded(self) -> int:
        return sum(t["uploadedEver"] for t in self._torrents("uploadedEver"))


class QBittorrent(Client):
    """qbittorrent-nox 4.5 (libtorrent 2.0): qBittorrent.conf in its profile, its Web API on 127.0.0.1."""

    name = "qbittorrent"
    uses_dht = True

    def __init__(self, root: Path, dht_nodes=None):
        super().__init__(root, dht_nodes)
        self.sandboxed = self.dht = can_unshare_mounts()
        config = self.root / "qBittorrent" / "config"
        config.mkdir(parents=True)
        (config / "qBittorrent.conf").write_text("\n".join([
            "[LegalNotice]", "Accepted=true", "",
            "[BitTorrent]",
            f"Session\\Port={self.port}", "Session\\Interface=lo", "Session\\InterfaceName=lo",
            f"Session\\InterfaceAddress={self.ip}", f"Session\\DHTEnabled={str(self.dht).lower()}",
            "Session\\LSDEnabled=false", "Session\\PeXEnabled=true", f"Session\\DefaultSavePath={self.data}",
            "Session\\AddTorrentPaused=false", "Session\\GlobalMaxRatio=-1", "Session\\QueueingSystemEnabled=false",
            "Session\\AnonymousModeEnabled=false", "Session\\Encryption=0",
            # Its figures (the payload counter read here) are refreshed this often, in ms: 1500 by default.
            "Session\\RefreshInterval=100", "",
            "[Network]", "PortForwardingEnabled=false", "",
            "[Preferences]", "WebUI\\Address=127.0.0.1", f"WebUI\\Port={self.rpc_port}", "WebUI\\LocalHostAuth=false",
            "WebUI\\CSRFProtection=false", "WebUI\\HostHeaderValidation=false", "WebUI\\ClickjackingProtection=false",
            "WebUI\\UseUPnP=false", "Connection\\UPnP=false", "Connection\\ResolvePeerCountries=false",
            "General\\Locale=en", "",
        ]))
        (self.root / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def command(self) -> list[str]:
        qbt = ["qbittorrent-nox", f"--profile={self.root}"]
        if not self.sandboxed:
            return qbt
        # A mount namespace of its own whose resolver is 127.0.0.1 (nothing answers): its DHT's public
        # bootstrap names, and any other, resolve nowhere. unshare execs the shell, the shell execs
        # qBittorrent: one PID, stopped as any other.
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'mount --bind "{self.root}/resolv.conf" /etc/resolv.conf && exec "$@"', "qbittorrent", *qbt]

    def api(self, path: str, data: bytes | None = None, headers: dict | None = None):
        return _http(f"http://127.0.0.1:{self.rpc_port}/api/v2/{path}", data, headers)

    def ready(self) -> bool:
        return self.api("app/version").startswith(b"v")

    def add(self, torrent: bytes) -> None:
        boundary = uuid.uuid4().hex
        parts = [(b'name="torrents"; filename="t.torrent"', torrent), (b'name="savepath"', str(self.data).encode()),
                 (b'name="paused"', b"false")]
        body = b"".join(b"--" + boundary.encode() + b"\r\nContent-Disposition: form-data; " + disposition
                        + b"\r\n\r\n" + value + b"\r\n" for disposition, value in parts) + b"--" + boundary.encode() + b"--\r\n"
        reply = self.api("torrents/add", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        if reply.strip() != b"Ok.":
            raise ValueError(f"qBittorrent refused the torrent: {reply[:200]!r}")

    def seeding(self) -> set[str]:
        return {t["hash"] for t in json.loads(self.api("torrents/info"))
                if t["progress"] == 1 and t["state"] in ("uploading", "stalledUP", "forcedUP")}

    def uploaded(self) -> int:
        # Its session-wide payload counter: the per-torrent one can miss a short transfer.
        return json.loads(self.api("transfer/info"))["up_info_data"]


class Aria2(Client):
    """aria2c 1.36: flags only, its JSON-RPC on 127.0.0.1 (a secret token of the test's)."""

    name = "aria2"
    uses_dht = True

    def __init__(self, root: Path, dht_nodes=None):
        super().__init__(root, dht_nodes)
        self.token = uuid.uuid4().hex
        self.entry = (dht_nodes or [None])[0]

    def command(self) -> list[str]:
        cmd = ["aria2c", "--no-conf=true", "--enable-rpc=true", f"--rpc-listen-port={self.rpc_port}",
               "--rpc-listen-all=false", f"--rpc-secret={self.token}", f"--interface={self.ip}",
               f"--listen-port={self.port}", f"--dht-listen-port={self.port}", "--enable-dht=true",
               "--enable-dht6=false", "--disable-ipv6=true", "--bt-enable-lpd=false", "--enable-peer-exchange=true",
               "--seed-ratio=0.0", f"--dir={self.data}", "--check-integrity=true", "--bt-hash-check-seed=true",
               f"--dht-file-path={self.root / 'dht.dat'}", "--auto-save-interval=0", "--summary-interval=0",
               "--console-log-level=warn", f"--log={self.log}.aria2", "--log-level=notice", "--quiet=true"]
        if self.entry is not None:
            cmd.append(f"--dht-entry-point={self.entry[0]}:{self.entry[1]}")
        return cmd

    def rpc(self, method: str, *params):
        body = json.dumps({"jsonrpc": "2.0", "id": "1", "method": method,
                           "params": [f"token:{self.token}", *params]}).encode()
        reply = json.loads(_http(f"http://127.0.0.1:{self.rpc_port}/jsonrpc", body,
                                 {"Content-Type": "application/json"}))
        if "error" in reply:
            raise ValueError(f"aria2 {method}: {reply['error']}")
        return reply["result"]

    def ready(self) -> bool:
        return bool(self.rpc("aria2.getVersion"))

    def add(self, torrent: bytes) -> None:
        self.rpc("aria2.addTorrent", base64.b64encode(torrent).decode(), [], {"dir": str(self.data)})

    def seeding(self) -> set[str]:
        return {t["infoHash"] for t in self.rpc("aria2.tellActive", ["infoHash", "seeder"]) if t["seeder"] == "true"}

    def uploaded(self) -> int:
        return sum(int(t["uploadLength"]) for t in self.rpc("aria2.tellActive", ["uploadLength"]))


class RTorrent(Client):
    """rtorrent 0.9.8 (libtorrent 0.13): rtorrent.rc in its directory, daemon mode, XML-RPC over SCGI."""

    name = "rtorrent"
    uses_dht = True

    def __init__(self, root: Path, dht_nodes=None):
        super().__init__(root, dht_nodes)
        (self.root / "session").mkdir()
        (self.root / "rtorrent.rc").write_text("\n".join([
            "system.daemon.set = true",
            f"session.path.set = {self.root / 'session'}",
            f"directory.default.set = {self.data}",
            f"network.bind_address.set = {self.ip}",
            f"network.local_address.set = {self.ip}",
            f"network.port_range.set = {self.port}-{self.port}",
            "network.port_random.set = no",
            f"network.scgi.open_port = 127.0.0.1:{self.rpc_port}",
            "dht.mode.set = on",
            f"dht.port.set = {self.port}",
            "protocol.pex.set = yes",
            "trackers.use_udp.set = yes",
            "pieces.hash.on_completion.set = no",
            f"log.open_file = main, {self.log}.rtorrent",
            "log.add_output = notice, main",
            "",
        ]))

    def command(self) -> list[str]:
        return ["rtorrent", "-n", "-o", f"import={self.root / 'rtorrent.rc'}"]

    def rpc(self, method: str, *params):
        body = xmlrpc.client.dumps(params, method).encode()
        head = [("CONTENT_LENGTH", str(len(body))), ("SCGI", "1"), ("REQUEST_METHOD", "POST"), ("REQUEST_URI", "/RPC2")]
        headers = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in head)
        with socket.create_connection(("127.0.0.1", self.rpc_port), timeout=5) as s:
            s.sendall(str(len(headers)).encode() + b":" + headers + b"," + body)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        return xmlrpc.client.loads(reply.split(b"\r\n\r\n", 1)[1])[0][0]

    def ready(self) -> bool:
        return bool(self.rpc("system.client_version"))

    def add(self, torrent: bytes) -> None:
        self.rpc("load.raw_start", "", xmlrpc.client.Binary(torrent), f"d.directory.set={self.data}")

    def _downloads(self, *fields: str) -> list[list]:
        return self.rpc("d.multicall2", "", "main", "d.hash=", *fields)

    def seeding(self) -> set[str]:
        return {h.lower() for h, complete, active in self._downloads("d.complete=", "d.is_active=")
                if complete and active}

    def uploaded(self) -> int:
        return sum(up for _, up in self._downloads("d.up.total="))


KINDS = {c.name: c for c in (Transmission, QBittorrent, Aria2, RTorrent)}
