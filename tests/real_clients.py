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

``World`` puts them together with a real opentracker and a few small
torrents made by mktorrent; ``CLIENTS`` names the ones it starts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
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

import libtorrent as lt

from crawler.bencode import codec as bencode
from crawler.sources import udp_codec
from tests.opentracker import OpenTracker
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


# --- torrents -------------------------------------------------------------------


def write_files(root: Path, name: str, files: dict[str, int]) -> Path:
    """Files of the given sizes (deterministic bytes) under ``root/name``; one file named "" is ``root/name``
    itself (a single-file torrent). Returns ``root/name``."""
    top = root / name
    for rel, size in files.items():
        path = top / rel if rel else top
        path.parent.mkdir(parents=True, exist_ok=True)
        seed = hashlib.sha1(f"{name}/{rel}".encode()).digest()
        path.write_bytes((seed * (size // 20 + 1))[:size])
    return top


def mktorrent(target: Path, out: Path, announce: str | None) -> bytes:
    """A .torrent of ``target`` made by mktorrent (32 KiB pieces), announcing to ``announce`` if given."""
    cmd = ["mktorrent", "--no-date", "--piece-length=15", f"--output={out}"]
    if announce:
        cmd.append(f"--announce={announce}")
    subprocess.run(cmd + [str(target)], check=True, capture_output=True, timeout=30)
    return out.read_bytes()


def info_hash(torrent: bytes) -> str:
    """The v1 info-hash (hex) of a .torrent's bytes: the SHA-1 of its info dictionary as encoded."""
    return hashlib.sha1(bencode.encode(bencode.decode(torrent)[b"info"])).hexdigest()


def with_nodes(torrent: bytes, nodes: list[tuple[str, int]]) -> bytes:
    """``torrent`` with a BEP 5 ``nodes`` list (DHT nodes to start from); its info-hash is unchanged."""
    meta = bencode.decode(torrent)
    meta[b"nodes"] = [[ip.encode(), port] for ip, port in nodes]
    return bencode.encode(meta)


class Torrent:
    """A torrent of the world: its .torrent, info-hash, name, size, file count and who seeds it."""

    def __init__(self, data: bytes, name: str, files: dict[str, int], seeders: tuple[str, ...]):
        self.data, self.name, self.seeders = data, name, seeders
        self.info_hash = info_hash(data)
        self.total_size, self.file_count = sum(files.values()), len(files)


# --- a tracker's view -------------------------------------------------------------


def scrape(tracker_port: int, info_hashes: list[str]) -> dict[str, tuple[int, int]]:
    """info-hash -> (seeders, leechers) as opentracker on 127.0.0.1:``tracker_port`` counts them (UDP scrape)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        dest = ("127.0.0.1", tracker_port)
        s.sendto(udp_codec.connect_request(21), dest)
        cid = udp_codec.parse_reply(s.recv(64)).connection_id
        s.sendto(udp_codec.scrape_request(cid, 22, [bytes.fromhex(h) for h in info_hashes]), dest)
        reply = udp_codec.parse_reply(s.recv(4096))
    return {h: (e.seeders, e.leechers) for h, e in zip(info_hashes, reply.entries)}




# --- the world: a tracker, the clients, their torrents -------------------------------

# key -> (name, files, who seeds it, announced to the tracker). Seeders: a client's name, "*" (every client)
# or "dht" (every client whose DHT runs). A file named "" is a single-file torrent.
SPECS = {
    "shared": ("Shared — three files", {"a.bin": 40_000, "b.txt": 1, "sub/c.dat": 70_000}, "*", True),
    "only-transmission": ("Tränsmission only", {"x.bin": 33_000, "y.bin": 1_000}, "transmission", True),
    "only-qbittorrent": ("qb-only.iso", {"": 45_000}, "qbittorrent", True),
    "only-aria2": ("aria2 only", {"p/q.bin": 20_000, "r.bin": 30_000, "s.bin": 5}, "aria2", True),
    "only-rtorrent": ("rtorrent-only.bin", {"": 61_000}, "rtorrent", True),
    **{f"fast-{c}": (f"fast {c}.bin", {"": 20_000 + i}, c, False) for i, c in enumerate(CLIENTS)},
    "control": ("control.bin", {"": 100_000}, "*", False),
    "dht": ("Delta — on the DHT alone", {"d1.bin": 30_000, "d2.bin": 2}, "dht", False),
}


class World:
    """A real opentracker on 127.0.0.1 and the four clients seeding ``SPECS``' torrents, made by mktorrent.

    ``start`` starts everything at once and returns when every client
    seeds its torrents and the tracker counts each seeder of the tracked
    ones; ``wait_dht`` when one DHT lookup finds every DHT client in the
    DHT-only torrent's swarm; ``stop`` stops every process by its PID.
    """

    def __init__(self, root: Path):
        self.root = root
        self.tracker_port = free_port("127.0.0.1")
        self.clients: dict[str, Client] = {name: KINDS[name](root) for name in CLIENTS}
        self.dht_clients = tuple(c.name for c in self.clients.values() if c.dht)
        # aria2 takes one DHT entry point: another client's node. The others learn the nodes from the
        # DHT-only torrent's BEP 5 "nodes", and from the queries that reach them.
        self.clients["aria2"].entry = next(c.endpoint for c in self.clients.values() if c.dht and c.name != "aria2")
        self.torrents = self._make()
        self.tracker = OpenTracker(root / "tracker", [t.info_hash for t in self.tracked()], self.tracker_port)

    def _make(self) -> dict[str, Torrent]:
        src = self.root / "files"
        src.mkdir()
        nodes = [c.endpoint for c in self.clients.values() if c.dht]
        torrents = {}
        for key, (name, files, who, tracked) in SPECS.items():
            top = write_files(src, name, files)
            data = mktorrent(top, self.root / f"{key}.torrent",
                             f"http://127.0.0.1:{self.tracker_port}/announce" if tracked else None)
            seeders = CLIENTS if who == "*" else self.dht_clients if who == "dht" else (who,)
            if who == "dht":
                data = with_nodes(data, nodes)
            torrents[key] = Torrent(data, name, files, seeders)
            for c in seeders:
                dest = self.clients[c].data / name
                shutil.copytree(top, dest) if top.is_dir() else shutil.copy(top, dest)
        return torrents

    def tracked(self) -> list[Torrent]:
        return [self.torrents[k] for k, spec in SPECS.items() if spec[3]]

    def start(self) -> World:
        try:
            self.tracker.start()
            for c in self.clients.values():
                c.start()
            for c in self.clients.values():
                c.wait_ready()
            for c in self.clients.values():
                for t in self.torrents.values():
                    if c.name in t.seeders:
                        c.add(t.data)
            for c in self.clients.values():
                want = {t.info_hash for t in self.torrents.values() if c.name in t.seeders}
                wait_for(f"{c.name} seeding its {len(want)} torrents", lambda c=c, w=want: w <= c.seeding(), 60,
                         c.proc, c.log)
            hashes = [t.info_hash for t in self.tracked()]
            want = {t.info_hash: (len(t.seeders), 0) for t in self.tracked()}
            wait_for("every seeder announced", lambda: scrape(self.tracker_port, hashes) == want, 60)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_dht(self, timeout: float = 60.0) -> None:
        """Until one DHT lookup of the DHT-only torrent, from a node of the test's own bootstrapped to the
        clients', finds every DHT client (by address: rtorrent's node returns the ports it stored
        byte-swapped)."""
        want = {self.clients[c].ip for c in self.dht_clients}
        target = lt.sha1_hash(bytes.fromhex(self.torrents["dht"].info_hash))
        probe = lt.session({
            "listen_interfaces": "127.0.15.1:0", "enable_dht": True, "enable_lsd": False, "enable_upnp": False,
            "enable_natpmp": False, "enable_incoming_tcp": False, "enable_incoming_utp": False,
            "dht_bootstrap_nodes": ",".join(f"{self.clients[c].ip}:{self.clients[c].port}" for c in self.dht_clients),
            "dht_restrict_routing_ips": False, "dht_restrict_search_ips": False, "dht_ignore_dark_internet": False,
            "alert_mask": lt.alert.category_t.dht_operation_notification,  # the get_peers replies
        })

        def lookup() -> bool:
            # One reply alert per node that answered with peers: their union is the lookup's.
            probe.dht_get_peers(target)
            found: set[str] = set()
            end = time.monotonic() + 10
            while time.monotonic() < end and not want <= found:
                found |= {ip for a in probe.pop_alerts() if isinstance(a, lt.dht_get_peers_reply_alert)
                          for ip, _ in a.peers()}
                time.sleep(0.05)
            return want <= found

        try:
            wait_for(f"one DHT lookup finding {sorted(want)}", lookup, timeout, every=0.5)
        finally:
            probe.pause()

    def stop(self) -> None:
        for c in self.clients.values():
            if c.proc is not None and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for c in self.clients.values():
            c.stop()
        self.tracker.stop()

    def __enter__(self) -> World:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
