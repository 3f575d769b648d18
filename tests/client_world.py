"""A world of other people's clients for the interoperability tests: a real opentracker, Debian's four clients
(tests/real_clients.py) and the torrents they seed, made by mktorrent.

``SPECS`` says which client seeds which torrent and which torrents are
announced to the tracker: one all four seed, one each client seeds alone
(its name can only come from that client), one each for the fetcher's
timing alone, a control torrent to download for real, and one on the DHT
alone (trackerless, with BEP 5 ``nodes`` naming the clients' DHT nodes).
``World`` starts it all at once and waits for events (each client's RPC
answering and saying it seeds, the tracker's scrape counting every seeder,
one DHT lookup finding every DHT client); ``scrape`` is the tracker's view
a test asserts on.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import libtorrent as lt

from crawler.bencode import codec as bencode
from crawler.sources.trackers import udp_codec
from tests.opentracker import OpenTracker
from tests.real_clients import CLIENTS, KINDS, Client, free_port, wait_for

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
