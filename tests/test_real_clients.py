"""The crawler against other people's clients: Debian's transmission-daemon, qbittorrent-nox, aria2c and
rtorrent seeding on loopback behind a real opentracker (tests/real_clients.py, tests/client_world.py).

One world for the module: the four clients, each on its own address,
seed small torrents made by mktorrent; the tracked ones are announced by
the clients themselves. Each test uses torrents no other test asks for,
and connects from addresses of its own (transmission takes one
connection per address and torrent, and frees it seconds after it
closed), so the tests do not depend on each other.

- A real ``peercrawl worker --until-idle`` counts each client once per
  torrent, names every torrent added as a bare hash from its peers' metadata
  (BEP 9), one torrent per client seeded by that client alone, takes no
  payload from any (each client's own counter), and withdraws from every
  swarm (the tracker's scrape counts the seeders alone).
- The metadata fetcher gets each client's torrent over TCP and uTP at once:
  with uTP's connect timeout at 7 s, a fetch that tried TCP only once uTP
  had failed could not end within its 6 s deadline against aria2 and
  rtorrent, which do not speak uTP. Each transport alone, too.
- Each client's upload counter does count a real download (so the
  no-payload checks could fail).
- A torrent on the DHT alone is found through the clients' own DHT nodes
  (qBittorrent's libtorrent, aria2's and rtorrent's; transmission's DHT
  drops loopback packets), counted, and named.
"""

from __future__ import annotations

import json
import time

import gevent
import libtorrent as lt
import pytest

from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher, NoMetadata
from crawler.sources.metadata.metadata_info import TorrentInfo
from tests.client_world import World, scrape
from tests.real_clients import CLIENTS, wait_for
from tests.test_worker_e2e import counter, env, pc, pcj  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

# libtorrent's uTP connect timeout (3 s by default) for the test that shows TCP does not wait for it: past the
# test's deadline, FAST_DEADLINE.
SLOW_UTP, FAST_DEADLINE = {"utp_connect_timeout": 7_000}, 6.0
TCP_ALONE = {"enable_outgoing_utp": False}
UTP_ALONE = {"enable_outgoing_tcp": False}
# The clients whose own transports include uTP (aria2 and rtorrent speak TCP only).
SPEAK_UTP = ("transmission", "qbittorrent")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with World(tmp_path_factory.mktemp("clients")) as w:
        yield w


def uploads(world: World) -> dict[str, int]:
    """Payload bytes each client has uploaded, by its own count."""
    return {name: c.uploaded() for name, c in world.clients.items()}


def info(t) -> TorrentInfo:
    return TorrentInfo(t.name, t.total_size, t.file_count)


def test_a_worker_counts_each_client_once_names_every_torrent_and_withdraws(world, env):  # noqa: F811
    tracked = world.tracked()
    before = uploads(world)
    env.update(PEERCRAWL_TRACKERS=f"udp://127.0.0.1:{world.tracker_port}/announce", PEERCRAWL_DHT="off",
               PEERCRAWL_METADATA="on", PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND="50",
               PEERCRAWL_REVISIT_SECONDS="3600", PEERCRAWL_RETRY_SECONDS="1")
    pcj(env, "add", *[t.info_hash for t in tracked])
    said = crawl_until_no_fetch_is_cut(env, "127.0.21", len(tracked))
    users = counter(env, "torrents")
    for t in tracked:
        got = pcj(env, "torrent", t.info_hash)
        assert users[f"torrents.{t.info_hash}.users"] == len(t.seeders), (t.name, users)
        assert got["peers_last_visit"] == len(t.seeders), got
        assert (got["seeders"], got["leechers"]) == (len(t.seeders), 0), got
        assert (got["name"], got["total_size"], got["file_count"]) == (t.name, t.total_size, t.file_count), said
    assert uploads(world) == before  # not one payload byte left any client
    # The crawler's "stopped" went out: the tracker counts the clients alone, and no leecher.
    assert scrape(world.tracker_port, [t.info_hash for t in tracked]) == {
        t.info_hash: (len(t.seeders), 0) for t in tracked}


def crawl_until_no_fetch_is_cut(env, subnet: str, concurrency: int, runs: int = 3) -> list[str]:
    """``worker --until-idle`` until no metadata fetch was cut by its end (at most ``runs`` times), each run's
    fetcher on an address of its own (``subnet``.run); returns the metadata log lines of every run.

    A fetch still running when a run goes idle gets 5 s and is then cut, and its torrent is due again
    within PEERCRAWL_RETRY_SECONDS (workers/metadata_names.py): transmission takes 2 to 4 s to answer,
    more on a busy machine. The next run, from another address (transmission refuses the same address
    for a while after a connection closed), visits it again and fetches."""
    said: list[str] = []
    for run in range(1, runs + 1):
        env["PEERCRAWL_METADATA_LISTEN"] = f"{subnet}.{run}:0"
        log = pc(env, "worker", "--until-idle", "--concurrency", str(concurrency), timeout=120).stderr
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{") and "metadata" in line]
        said += [json.dumps(line) for line in lines]
        cut = [line["info_hash"] for line in lines if line.get("event") == "metadata_fetch_cut"]
        if not cut:
            break
        for h in cut:  # until each is due again
            due = pcj(env, "torrent", h)["due"]
            time.sleep(max((due or 0) - time.time(), 0))
    return said


def fetch_from(client, torrent, address: str, extra: dict, timeout: float = 10.0):
    """One fetch of ``torrent`` from ``client`` alone by a fetcher of its own on ``address``: (what came,
    seconds it took, the fetcher's payload bytes received and sent)."""
    settings = Settings(allow_private=True, metadata_listen=((address, 0),), metadata_timeout=timeout)
    with MetadataFetcher(settings, extra=extra) as f:
        started = time.monotonic()
        got = f.fetch(torrent.info_hash, [client.endpoint])
        took = time.monotonic() - started
        counters = f.counters()
    return got, took, (counters["net.recv_payload_bytes"], counters["net.sent_payload_bytes"])


def fetch_each(world, extra: dict, clients, subnet: int, timeout: float = 10.0) -> dict:
    jobs = {name: gevent.spawn(fetch_from, world.clients[name], world.torrents[f"fast-{name}"],
                               f"127.0.{subnet}.{i + 1}", extra, timeout)
            for i, name in enumerate(clients)}
    gevent.joinall(list(jobs.values()), raise_error=True)
    return {name: job.value for name, job in jobs.items()}


def test_every_client_gives_its_name_over_tcp_and_utp_at_once(world):
    got = fetch_each(world, SLOW_UTP, CLIENTS, 22, timeout=FAST_DEADLINE)
    print({name: round(took, 3) for name, (_, took, _) in got.items()})
    for name, (answer, _, payload) in got.items():
        assert answer == info(world.torrents[f"fast-{name}"]), (name, answer)
        assert payload == (0, 0), name


def test_each_transport_alone(world):
    tcp = fetch_each(world, TCP_ALONE, CLIENTS, 26)
    utp = fetch_each(world, UTP_ALONE, CLIENTS, 27, timeout=5.0)
    print({"tcp": {n: round(t, 3) for n, (_, t, _) in tcp.items()},
           "utp": {n: round(t, 3) for n, (_, t, _) in utp.items()}})
    for name in CLIENTS:
        assert tcp[name][0] == info(world.torrents[f"fast-{name}"]), (name, tcp[name])
        if name in SPEAK_UTP:
            assert utp[name][0] == info(world.torrents[f"fast-{name}"]), (name, utp[name])
        else:  # no uTP connection ever came up: each attempt timed out (one may still be under way)
            assert isinstance(utp[name][0], NoMetadata) and utp[name][0].kind in ("unreachable", "timeout")
            assert "(uTP) [connect] [system]: Connection timed out" in utp[name][0].reason, (name, utp[name])


def test_each_clients_upload_counter_counts_a_real_download(world, tmp_path):
    # The no-payload checks read these counters: a real download of the control torrent from each client
    # alone (a libtorrent session with its default flags, over TCP) shows in each.
    t = world.torrents["control"]
    before = uploads(world)
    sessions = []
    for i, name in enumerate(CLIENTS):
        address = f"127.0.23.{i + 1}"
        s = lt.session({"listen_interfaces": f"{address}:0", "outgoing_interfaces": address, "enable_dht": False,
                        "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
                        "enable_outgoing_utp": False, "alert_mask": 0})
        atp = lt.add_torrent_params()
        atp.ti = lt.torrent_info(t.data)
        atp.save_path = str(tmp_path / name)
        atp.peers = [world.clients[name].endpoint]
        sessions.append((name, s, s.add_torrent(atp)))
    for name, _, handle in sessions:
        wait_for(f"the control torrent downloaded from {name}", lambda h=handle: h.status().is_seeding, 60)
    for name, c in world.clients.items():
        wait_for(f"{name} counting the upload", lambda c=c, n=name: c.uploaded() >= before[n] + t.total_size, 10)


def test_a_torrent_on_the_dht_alone_is_found_through_the_clients_nodes(world, env):  # noqa: F811
    assert {"aria2", "rtorrent"} <= set(world.dht_clients)  # qBittorrent too where a mount namespace can be had
    world.wait_dht()
    t = world.torrents["dht"]
    before = uploads(world)
    nodes = [world.clients[name].endpoint for name in world.dht_clients]
    env.update(PEERCRAWL_TRACKERS="", PEERCRAWL_DHT="on", PEERCRAWL_DHT_LISTEN="127.0.24.1:0",
               PEERCRAWL_DHT_BOOTSTRAP=",".join(f"{ip}:{port}" for ip, port in nodes), PEERCRAWL_DHT_TIMEOUT="10",
               PEERCRAWL_METADATA="on", PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND="50",
               PEERCRAWL_REVISIT_SECONDS="3600", PEERCRAWL_RETRY_SECONDS="1")
    pcj(env, "add", t.info_hash)
    crawl_until_no_fetch_is_cut(env, "127.0.25", 1)
    got = pcj(env, "torrent", t.info_hash)
    assert counter(env, "torrents")[f"torrents.{t.info_hash}.users"] == len(world.dht_clients), got
    assert got["peers_last_visit"] == len(world.dht_clients), got
    assert (got["name"], got["total_size"], got["file_count"]) == (t.name, t.total_size, t.file_count), got
    assert uploads(world) == before
