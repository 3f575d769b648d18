"""A worker estimates the size of a swarm only the DHT knows (BEP 33, crawler/sources/dht/dht_sizes.py).

The swarm of tests/test_dht_scrape.py: 16 libtorrent nodes holding a swarm
of 200 IPs (50 seeds, 150 others) announced from distinct loopback
addresses, each node returning one peer per reply, so a lookup finds a few
of them and only the nodes' bloom filters say how many there are. A real
``peercrawl worker`` with no tracker visits the torrent: its seeders and
leechers are the estimates (marked so), and its coverage is counted over
that size.
"""

from __future__ import annotations

import pytest

from crawler.sources.dht import dht_bloom
from tests.test_dht_scrape import HASHES, SIZES, filled  # noqa: F401 (fixture)
from tests.test_worker_e2e import env, pc, pcj  # noqa: F401 (fixture)


@pytest.mark.slow
def test_a_dht_only_swarm_gets_its_estimated_size(env, filled):  # noqa: F811
    ih = HASHES[1].hex()
    seeds, others = filled.seeds[HASHES[1]], filled.leechers[HASHES[1]]
    assert (len(seeds) + len(others), SIZES[1]) == (200, 200)
    endpoints = ",".join(f"{ip}:{port}" for ip, port in filled.swarm.endpoints[:3])
    env.update(PEERCRAWL_TRACKERS="", PEERCRAWL_DHT="on", PEERCRAWL_DHT_BOOTSTRAP=endpoints,
               PEERCRAWL_DHT_LISTEN="127.0.33.210:0", PEERCRAWL_DHT_TIMEOUT="8", PEERCRAWL_ALLOW_PRIVATE="1")
    pcj(env, "add", ih)
    pc(env, "worker", "--until-idle", "--concurrency", "1", timeout=90)
    t = pcj(env, "torrent", ih)
    assert t["visits"] == 1 and t["counted_last_visit"] >= 1, t
    assert t["counts_estimated"] is True
    bound = 3 * dht_bloom.standard_error(len(others)) + 1
    assert abs(t["seeders"] - len(seeds)) <= 3 * dht_bloom.standard_error(len(seeds)) + 1, t
    assert abs(t["leechers"] - len(others)) <= bound, t
    assert t["reported_last_visit"] == t["seeders"] + t["leechers"]
    assert t["coverage"] == round(t["counted_last_visit"] / t["reported_last_visit"], 4)
    costs = pcj(env, "status")["costs"]
    assert costs["dht_scrapes"] == 1 and 1 <= costs["dht_scrape_queries"] <= 64


def test_no_scrape_when_turned_off(env, filled):  # noqa: F811
    ih = HASHES[0].hex()
    endpoints = ",".join(f"{ip}:{port}" for ip, port in filled.swarm.endpoints[:3])
    env.update(PEERCRAWL_TRACKERS="", PEERCRAWL_DHT="on", PEERCRAWL_DHT_BOOTSTRAP=endpoints,
               PEERCRAWL_DHT_LISTEN="127.0.33.211:0", PEERCRAWL_DHT_TIMEOUT="8", PEERCRAWL_ALLOW_PRIVATE="1",
               PEERCRAWL_DHT_SCRAPE="off")
    pcj(env, "add", ih)
    pc(env, "worker", "--until-idle", "--concurrency", "1", timeout=90)
    t = pcj(env, "torrent", ih)
    assert t["visits"] == 1 and t["counted_last_visit"] >= 1, t
    assert (t["counts_estimated"], t["seeders"], t["reported_last_visit"], t["coverage"]) == (False, None, None, None)
    assert pcj(env, "status")["costs"]["dht_scrapes"] == 0
