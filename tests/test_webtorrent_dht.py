"""The crawler's DHT (a libtorrent session) against a DHT that is not libtorrent's: WebTorrent's
``bittorrent-dht`` (npm), six nodes on loopback (tests/webtorrent_dht.py).

Each node listens on an address of its own, 127.1.40.1 to 127.1.45.1 (a
/24 each), so the peers their announces store are distinct addresses. What
it took on loopback, and why:

- The crawler runs with ``PEERCRAWL_ALLOW_PRIVATE=1`` as every loopback test
  does: its address policy then lets 127.0.0.0/8 bootstrap nodes through,
  libtorrent's ip filter is empty, and its Sybil defences are off
  (``dht_restrict_routing_ips``, ``dht_restrict_search_ips``,
  ``dht_ignore_dark_internet``; crawler/sources/dht/dht_session.py). Nothing
  more: bittorrent-dht picks random node ids, not ones derived from the
  address (BEP 42), and libtorrent's ``dht_enforce_node_id`` is off by
  default, so they are taken as they are.
- ``bittorrent-dht`` makes no address checks of its own. Its nodes start
  with ``bootstrap: false`` (its default is the public routers) and are told
  of one another directly, so a test never waits for their bootstrap.
- The crawler's own bootstrap is another matter. k-rpc puts every node that
  queries it in its routing table, BEP 43's ``ro`` notwithstanding, so the
  first reply the crawler gets names the crawler itself (its id, its
  address) among the nodes closest to its id. libtorrent does not leave its
  own contact out of the traversal: it queries itself, gets no answer (it
  is read-only), and its bootstrap, and with it ``dht_bootstrap_alert``,
  ends only when that query times out, some 15 s later. A lookup waiting
  for the bootstrap reads libtorrent's counters each second
  (``DhtSource._refusal``) and starts once its routing table holds nodes,
  so the worker's lookup deadline here is 8 s, and a run takes a few
  seconds; the in-process test waits until the source says it is
  bootstrapped.

What the tests show:

- A real ``peercrawl worker --until-idle`` bootstrapped from one node that
  announced nothing finds a torrent announced on those nodes alone and counts
  exactly its peers: each announcing node's /24 is a country of its own in
  the test database, so the country counters name every announced address
  once and no other (not the nodes that only route, not the crawler). A
  torrent nobody announced is answered "nobody" (score x0.5), not failed.
- The crawler's queries, as the nodes read them: every one carries BEP 43's
  ``ro`` (it is a read-only node), none is an ``announce_peer`` and no node
  stores the crawler as a peer, and none made a node raise a warning (a
  packet it could not decode, a reply it did not expect). The worker's BEP 33
  scrape reaches them too; they do not implement BEP 33, and the torrent is
  left without a size rather than given one made from their ``values``.
- ``bittorrent-dht`` ignores ``ro``: k-rpc puts every node that queries it in
  its routing table, so the read-only crawler is in every table and would be
  handed out in ``nodes`` replies. The crawler still answers nothing: a ping
  to it from a node goes unanswered while the same node's ping to another
  node is answered, and so is its ping to a ``DhtSource`` made to answer
  (``read_only=False``, which the worker never runs): libtorrent reads and
  answers k-rpc's queries, and the silence is the read-only setting's.
- The crawler's ``DhtSource`` lookup returns exactly the announced
  ``(address, port)`` pairs, and nothing for a hash nobody announced, which
  is an answer (``ok``), not a failure.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from crawler.settings import Settings
from crawler.sources.dht.dht import DhtSource
from tests.mmdb import write_city_db
from tests.test_worker_e2e import counter, env, pc, pcj  # noqa: F401 (fixture)
from tests.webtorrent_dht import webtorrent_dht  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

NODES = [f"127.1.{40 + i}.1" for i in range(6)]
# Each node's /24 a country of its own, and the crawler's: the country counters say which addresses were counted.
COUNTRIES = ["Norway", "Sweden", "Finland", "Denmark", "Estonia", "Latvia"]
PLACES = {f"127.1.{40 + i}.0/24": (country, None, None) for i, country in enumerate(COUNTRIES)}
PLACES["127.0.26.0/24"] = ("Iceland", None, None)
WORKER_DHT, SOURCE_DHT, ANSWERING_DHT = "127.0.26.1", "127.0.26.2", "127.0.26.3"


def h(name: str) -> str:
    return hashlib.sha1(f"webtorrent dht: {name}".encode()).hexdigest()


def crawler_queries(stats: dict, ip: str) -> dict:
    """The queries the nodes read from ``ip``: method -> count, with "ro" and "scrape" (flags counted)."""
    return stats["queries"].get(ip, {})


def stored_peers(stats: dict, info_hash: str) -> set[tuple[str, int]]:
    """Every (address, port) any node stores for ``info_hash``."""
    return {tuple(p) for node in stats["peers"] for p in node.get(info_hash, [])}


def held(stats: dict, ip: str) -> set[tuple[str, int]]:
    """The addresses of ``ip`` in the nodes' routing tables."""
    return {tuple(a) for table in stats["tables"] for a in table if a[0] == ip}


def wait_bootstrapped(dht: DhtSource, timeout: float = 20.0) -> None:
    """Until ``dht`` has a node in its routing table: each ``dht_health`` call asks libtorrent for a fresh
    stats snapshot (its bootstrap alert may be 15 s away, module note)."""
    end = time.monotonic() + timeout
    while not dht.dht_health()["bootstrapped"]:
        assert time.monotonic() < end, "the crawler's DHT never had a node in its routing table"
        time.sleep(0.05)


def test_a_worker_counts_a_torrent_announced_on_bittorrent_dht_alone(webtorrent_dht, env, tmp_path):  # noqa: F811
    wd = webtorrent_dht(NODES)
    swarm, nobody = h("four peers"), h("nobody")
    # Nodes 0-3 announce; node 5, which announced nothing, is the crawler's only bootstrap node.
    announced = wd.announce(swarm, [(i, 27000 + i) for i in range(4)])
    assert stored_peers(wd.stats(), swarm) == announced
    env.update(GEOIP_DB=str(write_city_db(tmp_path / "nodes.mmdb", PLACES)),
               PEERCRAWL_TRACKERS="", PEERCRAWL_DHT="on", PEERCRAWL_DHT_LISTEN=f"{WORKER_DHT}:0",
               PEERCRAWL_DHT_BOOTSTRAP="{}:{}".format(*wd.endpoints[5]), PEERCRAWL_DHT_TIMEOUT="8")
    assert pcj(env, "add", swarm, nobody)["added"] == 2
    pc(env, "worker", "--until-idle", "--concurrency", "2", timeout=90)

    got = pcj(env, "torrent", swarm)
    assert (got["state"], got["visits"], got["failed_visits"], got["peers_last_visit"]) == ("cooling", 1, 0, 4), got
    assert got["last_visit_sources"] == {"dht": "looked up", "trackers": {}}, got
    assert counter(env, "torrents")[f"torrents.{swarm}.users"] == 4
    # Each announced address once, in its node's country; neither the routing-only nodes nor the crawler.
    assert counter(env, "countries") == {f"countries.{COUNTRIES[i]}.users": 1 for i in range(4)}
    # Their BEP 33 scrape had no filters to read: no size, rather than one made up from "values".
    assert (got["seeders"], got["leechers"], got["counts_estimated"]) == (None, None, False), got

    empty = pcj(env, "torrent", nobody)
    assert (empty["state"], empty["failed_visits"], empty["last_failure"]) == ("cooling", 0, None), empty
    assert (empty["peers_last_visit"], empty["last_outcome"], empty["score"]) == (0, "none", 0.5), empty
    assert empty["dht_schedule"]["empty_lookups_in_a_row"] == 1, empty

    stats = wd.stats()
    asked = crawler_queries(stats, WORKER_DHT)
    assert asked.get("get_peers", 0) >= 2 and asked["scrape"] >= 1, asked
    assert asked["ro"] == sum(n for q, n in asked.items() if q not in ("ro", "scrape")), asked  # every query read-only
    assert "announce_peer" not in asked, asked
    assert stored_peers(stats, swarm) == announced  # the crawler is no peer of it
    assert stats["problems"] == []


def test_the_crawlers_lookups_read_bittorrent_dht_exactly_and_its_node_answers_none(webtorrent_dht):  # noqa: F811
    wd = webtorrent_dht(NODES)
    swarm, nobody = h("three peers"), h("nobody either")
    announced = wd.announce(swarm, [(1, 28001), (3, 28003), (5, 28005)])
    settings = Settings(dht_bootstrap=(wd.endpoints[0],), dht_listen=((SOURCE_DHT, 0),), allow_private=True,
                        dht_timeout=8.0, dht_settle=0.5, trackers=())
    with DhtSource(settings) as dht:
        wait_bootstrapped(dht)
        found, none = dht.lookup(swarm), dht.lookup(nobody)
        assert found.ok and found.peers == announced, found
        assert none.ok and none.peers == frozenset(), none  # nobody there is an answer, not a failure
        # bittorrent-dht keeps the read-only node in its tables (k-rpc adds whoever queries it) ...
        crawler = held(wd.stats(), SOURCE_DHT)
        assert crawler
        # ... and the crawler answers none of its queries, while another node answers the same ping.
        assert wd.ping(wd.endpoints[1], node=0)
        for address in crawler:
            assert not wd.ping(address, node=0), address
    # The control: the same node made to answer queries (not how the worker runs it) answers that ping,
    # so the silence above is the read-only setting's, not a ping libtorrent cannot read.
    with DhtSource(settings.replace(dht_listen=((ANSWERING_DHT, 0),)), read_only=False) as answering:
        wait_bootstrapped(answering)
        replying = held(wd.stats(), ANSWERING_DHT)
        assert replying and all(wd.ping(address, node=0) for address in replying), replying

    stats = wd.stats()
    asked = crawler_queries(stats, SOURCE_DHT)
    assert asked.get("get_peers", 0) >= 2, asked
    assert asked["ro"] == sum(n for q, n in asked.items() if q not in ("ro", "scrape")), asked
    assert "announce_peer" not in asked, asked
    assert crawler_queries(stats, ANSWERING_DHT)["ro"] == 0  # the control's queries are not flagged read-only
    assert stored_peers(stats, swarm) == announced
    assert stats["problems"] == []
