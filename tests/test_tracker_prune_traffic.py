"""What a prune of tracker health sends to Redis: its candidates once, never once per page of the walk.

The walk reads every tracked torrent's tracker set a page at a time
(``tracker_names.named``); candidates no torrent names are looked for to the
end of the catalogue. Measured on a private redis-server (nothing else
talks to it), as the server's own count of bytes received.
"""

from __future__ import annotations

import hashlib
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.envparse import MAX_TRACKER_URL
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.sources.trackers import tracker_names
from crawler.sources.trackers.health import FAILURE, TrackerHealth
from crawler.torrents.items import NewItem
from tests import redis_servers

PERIOD = 60.0
CANDIDATES = 100
HASH = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = redis_servers.start(tmp_path_factory.mktemp("prune-traffic"), "redis")
    yield s
    s.stop()


def _long_url(tag: str, i: int) -> str:
    """A tracker URL of exactly MAX_TRACKER_URL bytes."""
    head = f"udp://{tag}-{i}.long.test:6969/announce?pk="
    return head + "k" * (MAX_TRACKER_URL - len(head))


def _received(client) -> int:
    return int(client.info("stats")["total_net_input_bytes"])


def _catalogue(client, keys: Keys, settings, n: int) -> None:
    """``n`` ready torrents, each naming two of a few short public trackers."""
    q = Queue(client, keys, settings)
    items = [NewItem(hashlib.sha1(f"{keys.namespace}-{i}".encode()).hexdigest(),
                     (f"udp://pub{i % 5}.example:1337/announce", f"http://pub{i % 7}.example/announce"))
             for i in range(n)]
    q.add(items)


def _prune_bytes(server, settings, catalogue: int, tag: str) -> tuple[int, int]:
    """(bytes the server received during one prune of CANDIDATES 4 KiB candidates no torrent names,
    entries it removed), over a catalogue of ``catalogue`` torrents in a namespace of its own."""
    client = server.client
    keys = Keys(f"traffic-{tag}-{catalogue}", 2)
    s = settings.replace(redis_url=server.url, namespace=keys.namespace)
    _catalogue(client, keys, s, catalogue)
    h = TrackerHealth(client, keys, refresh=0, flush=3600, prune_after=PERIOD)
    for i in range(CANDIDATES):
        h.record(_long_url(tag, i), FAILURE)
    assert client.hlen(keys.tracker_health) == CANDIDATES
    later = time.time() + PERIOD + 1
    before = _received(client)
    removed = h.prune(now=later)
    return _received(client) - before, removed


def test_a_prunes_traffic_does_not_grow_with_its_candidates_times_the_catalogue(server, settings):
    """100 candidates of 4 KiB (400 KiB) no torrent names, over 1,000 and then 5,000 torrents: each
    torrent adds what naming its set costs (~70 bytes), not the candidates again every 500 torrents."""
    # The scripts loaded first: a script's first call is answered NOSCRIPT and sent again.
    _prune_bytes(server, settings, 10, "warm")
    small, removed_small = _prune_bytes(server, settings, 1_000, "a")
    large, removed_large = _prune_bytes(server, settings, 5_000, "b")
    assert removed_small == removed_large == CANDIDATES
    candidate_bytes = CANDIDATES * MAX_TRACKER_URL
    per_torrent = (large - small) / 4_000
    # Sending the candidates with every page of 500 torrents costs 400 KiB / 500 = 820 bytes a torrent.
    assert per_torrent < 200, (small, large, per_torrent)
    # The candidates travel a few times at most (read into the index once, then the prune's one step),
    # whatever the catalogue.
    assert large < 3 * candidate_bytes + 5_000 * 200, (small, large)


def test_a_named_candidate_is_found_whatever_its_bytes(server, settings):
    """The walk matches candidates by a digest of their bytes: a URL of exactly the bound, one with
    non-ASCII characters and a short one, named by the last of many torrents, are all found named."""
    client = server.client
    keys = Keys("traffic-named", 3)
    s = settings.replace(redis_url=server.url, namespace=keys.namespace)
    _catalogue(client, keys, s, 1_200)
    long_named, long_unnamed = _long_url("named", 1), _long_url("named", 2)
    wide = "udp://tracker.ñandú.example:6969/announce?passkey=ÿ€"
    short = "udp://short.example:1/announce"
    Queue(client, keys, s).add([NewItem(hashlib.sha1(b"the named one").hexdigest(), (long_named, wide, short))])
    candidates = [long_named, long_unnamed, wide, short, "udp://nobody.example:1/announce"]
    assert tracker_names.named(client, keys, candidates, page=100) == {long_named, wide, short}

    h = TrackerHealth(client, keys, refresh=0, flush=3600, prune_after=PERIOD)
    for u in candidates:
        h.record(u, FAILURE)
    assert h.prune(now=time.time() + PERIOD + 1) == 2
    assert {u.decode() for u in client.hkeys(keys.tracker_health)} == {long_named, wide, short}


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300))
def test_python_and_lua_digest_a_url_alike_whatever_its_characters(server, settings, tail):
    """A candidate is found named by its digest: the one Python computes must be the one Lua computes
    from the bytes Redis stores, for any characters a URL may hold."""
    client = server.client
    keys = Keys("traffic-digest")
    url = "udp://d.example:1/announce?" + tail
    h = hashlib.sha1(url.encode()).hexdigest()
    Queue(client, keys, settings.replace(redis_url=server.url, namespace=keys.namespace)).add([NewItem(h, (url,))])
    try:
        assert tracker_names.named(client, keys, [url, url + "-not-named"]) == {url}
    finally:
        client.delete(keys.trackers(h))


def test_the_walks_script_refuses_digests_it_cannot_split(server):
    import redis

    from crawler.store import scripts

    script = scripts.register(server.client, "tracker_named", package="crawler.sources.trackers")
    k = Keys("traffic-args")
    for args in (["0123456789abcde"], ["0123456789abcdef", "x"]):
        with pytest.raises(redis.ResponseError, match="tracker_named"):
            script(keys=[k.trackers(HASH)], args=args)
    assert script(keys=[k.trackers(HASH)], args=[""]) == []
