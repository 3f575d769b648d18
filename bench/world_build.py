"""bench_world's world: which trackers there are, which torrents name which, who is in each swarm; and starting it.

The trackers (``servers``), each behind a tap of ``world_taps.py`` on an
address of its own (127.4.x.y) except the dead HTTP ones:

- ``ot<i>``: an opentracker (tests/opentracker.py), its UDP and HTTP faces on one
  port, two URLs;
- ``wt<i>``: WebTorrent's bittorrent-tracker (tests/webtorrent_tracker.py), HTTP
  and UDP on ports of their own, two URLs;
- ``slow``: an opentracker whose replies the tap holds ``slow_udp`` / ``slow_http``
  seconds (close to the crawler's UDP and HTTP timeouts), two URLs;
- ``dead<i>``: one URL each, half UDP (a tap that reads and never answers: silence,
  counted) and half HTTP (a port nobody listens on: refused).

Every torrent names 5 to 30 of those URLs, drawn by popularity (weights
falling as 1/rank^0.7 over a fixed shuffle of the URLs, so a few are named by
most torrents and most by few, as in real catalogues). ``empty`` of the
torrents have nobody anywhere; ``dht_only`` have peers only on the DHT
(three nodes of a libtorrent swarm announce them); the rest have 1 to 40
peers (most few), each a loopback address of 127.2.0.0/16 announced straight
to one or two of one to three of the working trackers the torrent names (so
those trackers disagree), and, where it names the slow one, half of its
swarms also there. The truth of a torrent is the set of its peers'
addresses.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tests.node_process as node_process
import tests.webtorrent_tracker as wtmod
from tests.dht_swarm import Swarm
from tests.opentracker import OpenTracker

# Peer k's address: 127.2.(64 * (k % 4) + q // 254).(q % 254 + 1), q = k // 4 (bench_worker's layout).
PEER_POOL = 6000
SWARM_FIRST_IP = 200  # the DHT swarm: 127.0.0.200 and up
DHT_LISTEN = "127.0.0.241:0"  # the crawler's DHT node


def peer_address(k: int) -> str:
    """The ``k``-th peer address (127.2.x.y)."""
    q, r = divmod(k, 4)
    return f"127.2.{64 * r + q // 254}.{q % 254 + 1}"


@dataclass
class Server:
    """One tracker: its kind, the address its tap listens on, its faces and, once up, their URLs."""

    name: str
    kind: str  # opentracker, webtorrent, slow, dead
    host: str
    faces: tuple[str, ...]
    urls: dict[str, str] = field(default_factory=dict)


@dataclass
class Torrent:
    """One torrent: the (server, face) endpoints it names and its peers on each working server."""

    info_hash: str
    endpoints: list[tuple[str, str]]
    peers: dict[str, list[int]] = field(default_factory=dict)  # server -> peer numbers
    dht: list[int] = field(default_factory=list)  # swarm nodes that announce it

    def truth(self, swarm_ips: list[str]) -> set[str]:
        """The addresses a complete count finds."""
        return {peer_address(k) for ks in self.peers.values() for k in ks} | {swarm_ips[i] for i in self.dht}

    @property
    def kind(self) -> str:
        """``empty``, ``dht_only`` or ``live``."""
        return "dht_only" if self.dht else ("live" if self.peers else "empty")


def servers(n_ot: int, n_wt: int, n_dead: int) -> list[Server]:
    """The world's trackers (module note)."""
    out = [Server(f"ot{i}", "opentracker", f"127.4.0.{i + 1}", ("udp", "http")) for i in range(n_ot)]
    out += [Server(f"wt{i}", "webtorrent", f"127.4.1.{i + 1}", ("http", "udp")) for i in range(n_wt)]
    out.append(Server("slow", "slow", "127.4.2.1", ("udp", "http")))
    out += [Server(f"dead{i}", "dead", f"127.4.3.{i + 1}", ("udp",) if i % 2 == 0 else ("http",))
            for i in range(n_dead)]
    return out


def torrents(world: list[Server], n: int, empty: float, dht_only: int, swarm_size: int,
             rng: random.Random) -> list[Torrent]:
    """``n`` torrents naming the world's URLs by popularity, their swarms (module note)."""
    endpoints = [(s.name, f) for s in world for f in s.faces]
    rng.shuffle(endpoints)
    weights = [1.0 / (rank + 1) ** 0.7 for rank in range(len(endpoints))]
    kinds = {s.name: s.kind for s in world}
    out = []
    for i in range(n):
        h = hashlib.sha1(f"world-{i}".encode()).hexdigest()
        k = rng.randint(5, 30)
        # Efraimidis-Spirakis: k endpoints drawn without replacement by weight
        named = sorted(range(len(endpoints)), key=lambda j: -rng.random() ** (1.0 / weights[j]))[:k]
        t = Torrent(h, [endpoints[j] for j in sorted(named)])
        if i < dht_only:
            t.dht = [(3 * i + d) % swarm_size for d in (0, 5, 9)]
        elif rng.random() >= empty:
            working = sorted({s for s, _ in t.endpoints if kinds[s] in ("opentracker", "webtorrent")})
            if working:
                _fill(t, working, "slow" in {s for s, _ in t.endpoints}, rng)
        out.append(t)
    return out


def _fill(t: Torrent, working: list[str], names_slow: bool, rng: random.Random) -> None:
    """Peers for a live torrent: each on one or two of one to three of its working trackers."""
    homes = rng.sample(working, min(len(working), rng.randint(1, 3)))
    size = 1 + int(39 * rng.random() ** 3)
    for k in rng.sample(range(PEER_POOL), size):
        for s in rng.sample(homes, 2 if len(homes) > 1 and rng.random() < 0.3 else 1):
            t.peers.setdefault(s, []).append(k)
    if names_slow and rng.random() < 0.5:
        mine = sorted({k for ks in t.peers.values() for k in ks})
        t.peers["slow"] = mine[: max(1, len(mine) // 2)]


def peer_port(k: int) -> int:
    """Peer ``k``'s port (the same on every tracker)."""
    return 20000 + k % 30000


def node_dir() -> Path:
    """tests/node with bittorrent-tracker installed: this tree's, else the main checkout's (a worktree
    compare.py makes has none: node_modules is not in git)."""
    here = ROOT / "tests" / "node"
    if (here / "node_modules" / "bittorrent-tracker").exists():
        return here
    common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    main = Path(common).parent / "tests" / "node" if common else here
    return main if (main / "node_modules" / "bittorrent-tracker").exists() else here


def dead_http_port(host: str) -> int:
    """A port on ``host`` with nothing listening (bound once, then let go)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class World:
    """The trackers, their taps and the DHT swarm, started; ``stop`` ends them all."""

    def __init__(self, tmp: Path, world: list[Server], items: list[Torrent], interval: int,
                 slow_udp: float, slow_http: float, swarm_size: int):
        self.tmp, self.servers, self.torrents = tmp, world, items
        self.interval, self.slow = interval, (slow_udp, slow_http)
        self.swarm_size = swarm_size
        self.ots: dict[str, OpenTracker] = {}
        self.wts: dict[str, wtmod.WebTorrentTracker] = {}
        self.taps: subprocess.Popen | None = None
        self.control = 0
        self.swarm: Swarm | None = None

    def start(self) -> World:
        """Start the trackers, the taps, the swarm; announce every peer. Raises RuntimeError if a part fails."""
        hashes = [t.info_hash for t in self.torrents]
        self._start_trackers(hashes)
        self._start_taps()
        self._populate()
        self.swarm = Swarm(size=self.swarm_size, first_ip=SWARM_FIRST_IP).start()
        expected = {}
        for t in self.torrents:
            if t.dht:
                expected[t.info_hash] = self.swarm.announce(t.info_hash, t.dht, 9000 + 10 * len(expected))
        self.swarm.wait_announced(expected, timeout=60.0, probe_ip="127.0.0.242")
        return self

    def _start_trackers(self, hashes: list[str]) -> None:
        for s in self.servers:
            if s.kind in ("opentracker", "slow"):
                self.ots[s.name] = OpenTracker(self.tmp / s.name, hashes).start()
        nd = node_dir()
        node_process.NODE_DIR = nd
        errors: list[Exception] = []

        def one(s: Server) -> None:
            try:
                self.wts[s.name] = wtmod.WebTorrentTracker(self.tmp / f"{s.name}.log").start()
            except RuntimeError as e:
                errors.append(e)

        threads = [threading.Thread(target=one, args=(s,)) for s in self.servers if s.kind == "webtorrent"]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]

    def _start_taps(self) -> None:
        taps = []
        for s in self.servers:
            local = ("127.0.0.1",)
            if s.name in self.ots:
                port = self.ots[s.name].port
                delay = self.slow if s.kind == "slow" else (0.0, 0.0)
                taps.append({"name": s.name, "host": s.host, "same_port": True,
                             "udp": {"target": [*local, port], "delay": delay[0]},
                             "http": {"target": [*local, port], "delay": delay[1]}})
            elif s.name in self.wts:
                wt = self.wts[s.name]
                taps.append({"name": s.name, "host": s.host, "same_port": False,
                             "udp": {"target": [*local, wt.udp_port]}, "http": {"target": [*local, wt.http_port]}})
            elif s.faces == ("udp",):
                taps.append({"name": s.name, "host": s.host, "same_port": False, "udp": {"target": None},
                             "http": None})
            else:
                s.urls["http"] = f"http://{s.host}:{dead_http_port(s.host)}/announce"
        plan = self.tmp / "taps.json"
        plan.write_text(json.dumps({"interval": self.interval, "taps": taps}))
        self.taps = subprocess.Popen([sys.executable, str(ROOT / "bench" / "world_taps.py"), str(plan)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.taps.stdout.readline()
        if not line:
            raise RuntimeError("world_taps.py did not start")
        up = json.loads(line)
        self.control = up["control"]
        for s in self.servers:
            for face, port in up["taps"].get(s.name, {}).items():
                s.urls[face] = f"{face}://{s.host}:{port}/announce"

    def _populate(self) -> None:
        """Announce every peer straight to its trackers (not through the taps: the taps count the crawler)."""
        by_ot: dict[tuple[str, int], list[str]] = {}
        for t in self.torrents:
            for s, ks in t.peers.items():
                for k in ks:
                    if s in self.ots:
                        by_ot.setdefault((s, k), []).append(t.info_hash)
                    else:
                        self.wts[s].announce_from(peer_address(k), t.info_hash, peer_port(k), left=k % 2)
        for (s, k), hashes in by_ot.items():
            self.ots[s].announce_many(peer_address(k), hashes, peer_port(k), left=k % 2)

    def url_list(self, t: Torrent) -> list[str]:
        """The URLs ``t`` names."""
        by_name = {s.name: s for s in self.servers}
        return [by_name[s].urls[f] for s, f in t.endpoints]

    def stop(self) -> None:
        """Stop everything started (by the handles kept, never by name)."""
        if self.taps is not None:
            try:
                self.taps.stdin.close()
                self.taps.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.taps.kill()
                self.taps.wait(5)
            self.taps = None
        for wt in self.wts.values():
            wt.stop()
        for ot in self.ots.values():
            ot.stop()
        if self.swarm is not None:
            self.swarm.close()
            self.swarm = None
