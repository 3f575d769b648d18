"""How long a name takes from each real client: BEP 9 fetches from transmission, qBittorrent, aria2 and rtorrent.

Usage: python bench/bench_metadata_clients.py [--rounds 5]

The four Debian clients seed on loopback (tests/real_clients.py, one
address each). Each round fetches each client's own torrent, the four at
once, by a fetcher of its own on a fresh address (transmission refuses an
address for a torrent for a while after a connection closed), four ways:

- ``one_session``: the baseline, one libtorrent session with both
  transports as the fetcher had it: libtorrent tries uTP first and TCP only
  after the uTP connect failed (``utp_connect_timeout``, 3 s, and a
  reconnect). Its flags and settings are the fetcher's
  (``metadata_session.magnet_params``, ``session_params`` with both
  transports on); seconds to ``metadata_received_alert``.
- ``both``: ``MetadataFetcher`` as it is, a session per transport, each
  peer tried over TCP and uTP at once;
- ``tcp`` and ``utp``: ``MetadataFetcher`` with the other transport off.

Prints JSON: per client and way, the median and the worst seconds of the
rounds, and how many brought the name (a fetch has ``--deadline`` s).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gevent
import libtorrent as lt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crawler import logs
from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher
from crawler.sources.metadata.metadata_info import TorrentInfo
from crawler.sources.metadata.metadata_session import allow_only, magnet_params, session_params
from tests.client_world import World
from tests.real_clients import CLIENTS

WAYS = {"one_session": None, "both": {}, "tcp": {"enable_outgoing_utp": False}, "utp": {"enable_outgoing_tcp": False}}


def one_session(settings: Settings, info_hash: str, peer: tuple[str, int], save_path: str) -> tuple[bool, float]:
    """The baseline fetch: one session, both transports, libtorrent's order (uTP first)."""
    params = session_params(settings, "utp")
    params.update(enable_outgoing_tcp=True, enable_outgoing_utp=True)
    session = lt.session(params, 0)
    session.add_extension("ut_metadata")
    session.set_ip_filter(allow_only([peer[0]], True))
    started = time.monotonic()
    session.async_add_torrent(magnet_params(bytes.fromhex(info_hash), [peer], save_path))
    end = started + settings.metadata_timeout
    got = False
    while not got and time.monotonic() < end:
        gevent.sleep(0.01)
        got = any(isinstance(a, lt.metadata_received_alert) for a in session.pop_alerts())
    took = time.monotonic() - started
    session.pause()
    gevent.sleep(4.0)  # let its uTP connects end: the destructor waits for them holding the GIL
    return got, took


def fetch(way: str, address: str, info_hash: str, peer: tuple[str, int], deadline: float, save: str):
    """One fetch the ``way`` named, from ``address``: (the name came, seconds)."""
    settings = Settings(allow_private=True, metadata_listen=((address, 0),), metadata_timeout=deadline)
    if WAYS[way] is None:
        return one_session(settings, info_hash, peer, save)
    with MetadataFetcher(settings, extra=WAYS[way]) as f:
        started = time.monotonic()
        got = f.fetch(info_hash, [peer])
        return isinstance(got, TorrentInfo), time.monotonic() - started


def main() -> None:
    """Start the clients, run the rounds, print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="fetches per client and way (default 5)")
    ap.add_argument("--deadline", type=float, default=8.0, help="a fetch's deadline, s (default 8)")
    a = ap.parse_args()
    logs.configure("warning", "json")
    root = Path(tempfile.mkdtemp(prefix="bench-metadata-clients-"))
    t0 = time.monotonic()
    seconds: dict = {c: {w: [] for w in WAYS} for c in CLIENTS}
    named: dict = {c: {w: 0 for w in WAYS} for c in CLIENTS}
    with World(root) as world:
        for n in range(a.rounds):
            for w, way in enumerate(WAYS):
                jobs = {c: gevent.spawn(fetch, way, f"127.0.{100 + w}.{n * len(CLIENTS) + i + 1}",
                                        world.torrents[f"fast-{c}"].info_hash, world.clients[c].endpoint,
                                        a.deadline, str(root / "save"))
                        for i, c in enumerate(CLIENTS)}
                gevent.joinall(list(jobs.values()), raise_error=True)
                for c, job in jobs.items():
                    ok, took = job.value
                    named[c][way] += ok
                    seconds[c][way].append(took)
            print(f"bench_metadata_clients: round {n + 1} done", file=sys.stderr)
    out = {"rounds": a.rounds, "deadline_s": a.deadline, "clients": {
        c: {way: {"named": named[c][way], "median_s": round(statistics.median(ts), 3), "worst_s": round(max(ts), 3)}
            for way, ts in seconds[c].items()} for c in CLIENTS},
        "bench_seconds": round(time.monotonic() - t0, 1)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
