"""The DHT on IPv4 and IPv6 (BEP 32) against real libtorrent swarms on loopback, one per family.

The IPv4 swarm: 8 nodes on 127.0.0.20-27. The IPv6 swarm: 12 nodes on
addresses added to ``lo`` for the module (tests/loopback6.py), 8 in one /64
and 4 in another, so its peers are distinct IPs that a test GeoIP database
places in two countries. ``HASH_A`` is announced on both swarms, ``HASH_6``
on the IPv6 one alone. The crawler's node listens on a 127.0.0.x address and
``::1`` and bootstraps from three nodes of each swarm.

A machine without IPv6 is simulated two ways: an IPv6 listen address that no
interface has (binding to it fails with ``EADDRNOTAVAIL``, as binding to
``[::]`` fails with ``EAFNOSUPPORT`` where the kernel has no IPv6: the same
check, the same way out), and a real network namespace (``unshare --net``)
whose only interface is its loopback, so no IPv6 route exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import gevent
import pytest
from structlog.testing import capture_logs

from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.dht import dht_session
from crawler.sources.dht.dht import DhtSource
from crawler.sources.dht_listen import listening
from tests.dht_swarm import HASH_A, Swarm, announced_swarm, routing_nodes
from tests.loopback6 import PREFIX, loopback_addresses
from tests.mmdb import write_city_db
from tests.test_worker_e2e import ROOT, counter, env, pc, pcj  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

V6_FIRST = [f"{PREFIX}1::{i:x}" for i in range(0x20, 0x28)]
V6_SECOND = [f"{PREFIX}2::{i:x}" for i in range(0x20, 0x24)]
HASH_6 = hashlib.sha1(b"peercrawl-test-ipv6-only").hexdigest()
PLAN_6 = {HASH_A: ([0, 5, 9], 7100), HASH_6: ([1, 2, 8, 10, 11], 7200)}
# An address of the tests' block that no interface has.
MISSING = f"{PREFIX}ffff::1"
PLACES = {
    "127.0.0.0/24": ("Iceland", None, None),
    f"{PREFIX}1::/64": ("Germany", "Berlin", "10117"),
    f"{PREFIX}2::/64": ("Brasil", "São Paulo", "01000-000"),
}


@pytest.fixture(scope="module")
def v4():
    with announced_swarm(size=8, announcements={HASH_A: ([0, 3, 5], 7000)}) as swarm:
        yield swarm


@pytest.fixture(scope="module")
def v6():
    with loopback_addresses(V6_FIRST + V6_SECOND), Swarm(ips=V6_FIRST + V6_SECOND) as swarm:
        swarm.expected = {ih: swarm.announce(ih, nodes, port) for ih, (nodes, port) in PLAN_6.items()}
        swarm.wait_announced(swarm.expected, probe_ip="::1")
        yield swarm


def both(v4, v6, listen, **changes) -> Settings:
    return Settings(dht_listen=listen, dht_bootstrap=tuple(v4.endpoints[:3] + v6.endpoints[:3]), allow_private=True,
                    dht_timeout=8.0, dht_settle=0.5, trackers=(), **changes)


def test_a_node_on_both_families_finds_the_ipv4_and_the_ipv6_peers(v4, v6):
    with DhtSource(both(v4, v6, (("127.0.0.3", 0), ("::1", 0)))) as dht:
        assert dht.listen == (("127.0.0.3", 0), ("::1", 0))
        assert dht._session.get_settings()["listen_interfaces"] == "127.0.0.3:0,[::1]:0"
        assert dht._session.get_settings()["dht_bootstrap_nodes"] == listen_text(v4.endpoints[:3] + v6.endpoints[:3])
        # spawn order, not joinall's finishing order (tests/test_dht.py says why)
        ga, g6 = gevent.spawn(dht.lookup, HASH_A), gevent.spawn(dht.lookup, HASH_6)
        gevent.joinall([ga, g6], raise_error=True)
        assert dht.dht_health()["bootstrap_nodes"] == 6
    assert ga.value.ok and g6.value.ok, (ga.value.error, g6.value.error)
    assert ga.value.peers == v4.expected[HASH_A] | v6.expected[HASH_A]
    assert g6.value.peers == v6.expected[HASH_6]
    assert all(":" in ip for ip, _ in g6.value.peers) and len(v6.expected[HASH_6]) == 5


def test_without_ipv6_the_node_runs_on_ipv4_alone_and_says_so_once(v4, v6):
    with capture_logs() as logs:
        dht = DhtSource(both(v4, v6, (("127.0.0.4", 0), (MISSING, 0))))
    with dht:
        warnings = [e for e in logs if e["log_level"] == "warning"]
        assert [e["event"] for e in warnings] == ["dht_ipv6_unusable"], logs
        assert warnings[0]["reason"].startswith(f"cannot bind a UDP socket to [{MISSING}]: ")
        assert warnings[0]["listen"] == "127.0.0.4:0" and warnings[0]["bootstrap_dropped"] == 3
        assert dht.listen == (("127.0.0.4", 0),) and dht.bootstrap == v4.endpoints[:3]
        assert dht._session.get_settings()["listen_interfaces"] == "127.0.0.4:0"
        r = dht.lookup(HASH_A)
    assert r.ok and r.peers == v4.expected[HASH_A]


def test_no_usable_listen_address_is_a_one_line_error():
    with pytest.raises(SettingsError, match=rf"^PEERCRAWL_DHT_LISTEN: no address this machine can listen on "
                                            rf"\(cannot bind a UDP socket to \[{MISSING}\]: .*\)$"):
        listening(((MISSING, 0),), [])


NAMESPACE_RUN = """
import json
from structlog.testing import capture_logs
from crawler.settings import Settings
from crawler.sources.dht.dht import DhtSource
with capture_logs() as logs:
    dht = DhtSource(Settings(dht_bootstrap=(("127.0.0.1", 6881),), allow_private=True))
dht.close()
print(json.dumps({"listen": dht.listen, "warnings": [e for e in logs if e["log_level"] == "warning"]}))
"""


def test_a_machine_without_an_ipv6_route_runs_the_default_on_ipv4_alone():
    # A fresh network namespace: its loopback, nothing else; the default listen addresses.
    p = subprocess.run(["unshare", "--net", "sh", "-c", f'ip link set lo up && exec "{sys.executable}" -c "$0"',
                        NAMESPACE_RUN], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT), check=False)
    if p.returncode != 0 and "unshare" in p.stderr and not p.stdout:
        pytest.skip(f"no network namespace here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["listen"] == [["0.0.0.0", 0]]
    assert [w["event"] for w in out["warnings"]] == ["dht_ipv6_unusable"]
    assert out["warnings"][0]["reason"].startswith("no IPv6 route from [::] to 2001:7fd::1: ")


def test_the_address_policy_keeps_the_node_away_from_refused_ipv6_nodes(v6):
    # The swarm's unique local addresses are refused unless private addresses are allowed.
    sessions = {private: dht_session.new_session(Settings(allow_private=private, dht_listen=(("::1", 0),)), [])
                for private in (False, True)}
    try:
        for s in sessions.values():
            for ep in v6.endpoints:
                s.add_dht_node(ep)
        end = time.monotonic() + 5
        while routing_nodes(sessions[True]) < 4 and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.2)
        assert routing_nodes(sessions[True]) >= 4 and routing_nodes(sessions[False]) == 0
    finally:
        sessions.clear()


def test_a_worker_counts_the_ipv6_peers_it_finds(env, v4, v6, tmp_path):  # noqa: F811 (fixture)
    env.update(
        GEOIP_DB=str(write_city_db(tmp_path / "city6.mmdb", PLACES)),
        PEERCRAWL_TRACKERS="",
        PEERCRAWL_DHT="on",
        PEERCRAWL_DHT_LISTEN="127.0.0.243:0,[::1]:0",
        PEERCRAWL_DHT_BOOTSTRAP=listen_text(v4.endpoints[:3] + v6.endpoints[:3]),
        PEERCRAWL_DHT_TIMEOUT="8",
    )
    truth = {ih: {ip for ip, _ in v4.expected.get(ih, set()) | v6.expected[ih]} for ih in (HASH_A, HASH_6)}
    assert pcj(env, "add", *truth)["added"] == 2
    pc(env, "worker", "--until-idle", "--concurrency", "4", timeout=90)
    torrents = counter(env, "torrents")
    for ih, ips in truth.items():
        assert pcj(env, "torrent", ih)["peers_last_visit"] == len(ips), ih
        assert torrents[f"torrents.{ih}.users"] == len(ips), ih
    every = set().union(*truth.values())
    assert counter(env, "countries") == {
        "countries.Iceland.users": sum(ip.startswith("127.0.0.") for ip in every),
        "countries.Germany.users": sum(ip.startswith(f"{PREFIX}1::") for ip in every),
        "countries.Brasil.users": sum(ip.startswith(f"{PREFIX}2::") for ip in every),
    }
