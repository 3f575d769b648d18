"""What one tracker may hand in is bounded, and what it does is shown: unexpected
exceptions are failures that back off, floods are cut and counted, caches stay
bounded, unused health is pruned, refusals are counted apart, numwant is
max + 1 and a tracker's own cap is learned."""

from __future__ import annotations

import hashlib
import os
import socket
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.queue.queue import Queue
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.source_settings import TrackerSpec
from crawler.sources.trackers.health import TrackerHealth
from crawler.sources.trackers.health_report import tracker_report
from crawler.sources.trackers.trackers import Trackers
from crawler.torrents.items import NewItem
from tests import hostile
from tests.hostile import HostileHttpTracker, HostileUdpTracker, ListingUdpTracker, http_tracker, udp_tracker  # noqa: F401 (fixtures)


@pytest.fixture
def settings(settings):
    """These tests read the announce exchange itself: no scrape before it (tests/test_tracker_scrape_first.py)."""
    return settings.replace(scrape_first=False)


def _hash(mode: int = 0) -> str:
    return (bytes([mode]) + os.urandom(19)).hex()


def _trackers(settings, client, keys, **kw) -> Trackers:
    s = settings.replace(**{"udp_timeout": 0.5, "udp_retries": 1, "http_timeout": 3.0, **kw})
    return Trackers(s, client, keys)


# --- item 4: whatever escapes an exchange is that tracker's failure ------------------------


@pytest.mark.parametrize("path, why", [
    ("/superscript", ""),
    ("/bigint", ""),
    ("/hugeinterval", ""),
])
def test_an_exception_in_the_exchange_is_a_recorded_failure_that_backs_off(http_tracker, settings, client, keys,
                                                                           path, why):
    t = _trackers(settings, client, keys, tracker_backoff_after=2)
    url = http_tracker.base + path
    try:
        for _ in range(2):
            r = t.announce(url, _hash())
            assert not r.ok and r.error and why in r.error
            assert "Traceback" not in r.error
        t.health.refresh = 0
        skipped = t.announce(url, _hash())
        assert not skipped.ok and "backing off" in skipped.error
    finally:
        t.close()
    rep = tracker_report(client, keys, 20)[url]
    assert rep["failures"] == 2 and rep["answers"] == 0 and rep["backing_off"]


# --- item 5: peers per source bounded, the cut counted ------------------------------------


def test_a_2_mib_http_reply_keeps_factor_times_max_and_counts_the_cut(http_tracker, settings, client, keys):
    import gevent

    t = _trackers(settings, client, keys, source_peers_factor=2)
    url = http_tracker.base + "/flood"
    hostile.flood_body()  # built before the clock starts: the stand-in shares our event loop
    stalls = [0.0]

    def tick():
        # CPU time of this thread between ticks: the time other greenlets held
        # the hub, not the time a loaded machine gave the CPU to other processes.
        last = time.thread_time()
        while True:
            gevent.sleep(0.001)
            now = time.thread_time()
            stalls[0], last = max(stalls[0], now - last), now

    ticker = gevent.spawn(tick)
    try:
        r = t.announce(url, _hash())
        assert r.ok, r.error
        assert len(r.peers) == 400  # 2 x the default max of 200
        assert r.returned == hostile.HTTP_FLOOD_ENTRIES
    finally:
        ticker.kill()
        t.close()
    # Cut before decoding: no second-long stall of every other greenlet (decoding it all took ~1.2 s).
    assert stalls[0] < 0.4
    rep = tracker_report(client, keys, 20)[url]
    assert rep["peers_cut"] == hostile.HTTP_FLOOD_ENTRIES - 400 and rep["answers"] == 1


def test_a_flooding_udp_reply_is_cut_before_decoding(udp_tracker, settings, client, keys):
    t = _trackers(settings, client, keys, source_peers_factor=3,
                  trackers=(TrackerSpec(udp_tracker.url, 50),))
    try:
        r = t.announce(udp_tracker.url, _hash(hostile.UDP_FLOOD))
        assert r.ok, r.error
        assert len(r.peers) == 150 and r.returned == hostile.FLOOD_DATAGRAM_ENTRIES
    finally:
        t.close()
    assert tracker_report(client, keys, 20)[udp_tracker.url]["peers_cut"] == hostile.FLOOD_DATAGRAM_ENTRIES - 150


def test_caches_stay_bounded_after_many_distinct_trackers(settings, client, keys):
    trackers = [HostileUdpTracker() for _ in range(40)]
    names = {f"t{i}.bounded.test": tr.port for i, tr in enumerate(trackers)}

    def resolver(host, port):
        # Two addresses per name (so the one that answered is remembered), both the stand-in's.
        return [(socket.AF_INET, ("127.0.0.1", port)), (socket.AF_INET6, ("::1", port))]

    s = settings.replace(udp_timeout=0.5, udp_retries=1, tracker_cache_size=16)
    t = Trackers(s, client, keys, resolver=resolver)
    t.health.flush_every = 3600  # only the size bound flushes the batch
    try:
        for name, port in names.items():
            r = t.announce(f"udp://{name}:{port}/announce", _hash(hostile.UDP_GOOD))
            assert r.ok, r.error
        assert len(t.addresses.dns) == 16 and len(t.addresses.good) == 16
        assert len(t.udp._conn) <= 16
        assert len(t.health._state) == 16 and len(t.health._batch) < 16
    finally:
        t.close()
        for tr in trackers:
            tr.close()
    # Nothing lost by the bounds: every tracker's answer reached Redis.
    rep = tracker_report(client, keys, limit=40)
    assert len(rep) == 40 and sum(x["answers"] for x in rep.values()) == 40


def test_unused_tracker_health_is_pruned_atomically(client, keys):
    # prune is given the time: how long each step takes does not matter.
    h = TrackerHealth(client, keys, refresh=0, prune_after=60)
    h.record("udp://gone.example:1/announce", False)
    h.record("udp://gone.example:2/announce", True)
    h.flush()
    gone_by = time.time()
    time.sleep(0.05)  # the next use is written strictly later
    h.record("udp://used.example:1/announce", False)
    assert h.prune(now=gone_by + 60 + 0.01) == 2
    assert set(tracker_report(client, keys, 20)) == {"udp://used.example:1/announce"}
    assert client.zrange(keys.tracker_used, 0, -1) == [b"udp://used.example:1/announce"]
    assert h.prune() == 0


def test_prune_setting_must_outlast_the_backoff_and_the_revisit():
    from crawler.errors import SettingsError

    with pytest.raises(SettingsError, match="PEERCRAWL_TRACKER_PRUNE_SECONDS"):
        Settings.from_env({"PEERCRAWL_TRACKER_PRUNE_SECONDS": "3600"})
    assert Settings.from_env({}).tracker_prune_seconds == 7 * 86400


# --- item 7: refusals counted apart, never backing off -------------------------------------


def test_a_tracker_refusing_everything_shows_refusals_and_keeps_answering(http_tracker, udp_tracker, settings,
                                                                          client, keys):
    t = _trackers(settings, client, keys, tracker_backoff_after=1)
    t.health.refresh = 0
    http_url = http_tracker.base + "/failure"
    try:
        for _ in range(3):
            assert "unregistered torrent" in t.announce(http_url, _hash()).error
            assert "go away" in t.announce(udp_tracker.url, _hash(hostile.UDP_ERROR)).error
        t.health.flush()
    finally:
        t.close()
    rep = tracker_report(client, keys, 20)
    assert {k: rep[http_url][k] for k in ("answers", "failures", "refusals", "backing_off")} == {
        "answers": 0, "failures": 0, "refusals": 3, "backing_off": False}
    assert rep[http_url]["last_refusal"] == "tracker refused: unregistered torrent"
    assert rep[udp_tracker.url]["refusals"] == 3 and not rep[udp_tracker.url]["backing_off"]
    assert rep[udp_tracker.url]["last_refusal"] == "tracker error: go away"


# --- item 13: numwant max + 1; caps learned --------------------------------------------------


def _visit_score(settings, client, keys, tmp_path, url, ih):
    from crawler.counters.recorder import Recorder
    from tests.mmdb import write_city_db
    from workers.visit import Visitor

    s = settings.replace(geoip_db=write_city_db(tmp_path / "c.mmdb"), udp_timeout=1.0)
    q = Queue(client, keys, s)
    view = QueueView(q.client, q.keys)
    q.add([NewItem(ih, (url,))])
    t = Trackers(s, client, keys)
    try:
        (lease,) = q.claim(1)
        v = Visitor(q, keys, s, t, Recorder(client, keys, s)).visit(lease)
    finally:
        t.close()
    return v, view.state(ih)[1]


def test_a_tracker_clamping_numwant_has_its_cap_learned_and_a_big_swarm_scores_full(settings, client, keys,
                                                                                   tmp_path):
    tr = ListingUdpTracker(swarm=3000, clamp=82)
    try:
        t = _trackers(settings, client, keys, udp_timeout=1.0)
        try:
            r = t.announce(tr.url, _hash())
            assert r.ok, r.error
            assert tr.wanted == [201]  # max + 1
            assert r.returned == 82 and len(r.peers) == 81  # its own entry was one of the 82
            assert r.max_peers == 82 and r.full
        finally:
            t.close()
        assert tracker_report(client, keys, 20)[tr.url]["learned_cap"] == 82
        # A real visit of another busy torrent on that tracker: x1.2, not x0.8.
        ih = hashlib.sha1(b"clamped-busy-swarm").hexdigest()
        v, score = _visit_score(settings, client, keys, tmp_path, tr.url, ih)
        assert (v.state, v.peers) == ("cooling", 81)
        assert score == pytest.approx(1.2)
    finally:
        tr.close()


def test_the_learned_cap_rises_when_a_reply_returns_more_and_small_swarms_teach_nothing(settings, client, keys):
    small = ListingUdpTracker(swarm=30, clamp=82)
    tr = ListingUdpTracker(swarm=3000, clamp=60)
    try:
        t = _trackers(settings, client, keys, udp_timeout=1.0)
        t.health.refresh = 0
        try:
            r = t.announce(small.url, _hash())
            assert r.ok and r.returned == 31 and r.max_peers == 200 and not r.full  # the whole swarm: no cap
            assert t.announce(tr.url, _hash()).max_peers == 60
            tr.clamp = 100  # the tracker's operator raised its cap
            r = t.announce(tr.url, _hash())
            assert r.returned == 100 and r.max_peers == 100 and r.full
        finally:
            t.close()
        rep = tracker_report(client, keys, 20)
        assert rep[small.url]["learned_cap"] is None and rep[tr.url]["learned_cap"] == 100
    finally:
        small.close()
        tr.close()


def test_a_tracker_listing_the_requester_still_gives_max_real_peers(settings, client, keys, tmp_path):
    tr = ListingUdpTracker(swarm=3000)
    try:
        ih = hashlib.sha1(b"listing-busy-swarm").hexdigest()
        v, score = _visit_score(settings, client, keys, tmp_path, tr.url, ih)
        assert tr.wanted == [201]
        assert v.peers == 200  # 201 entries, ours among them: 200 real peers
        assert score == pytest.approx(1.2)
    finally:
        tr.close()


# --- item 5: passkeys redacted in status, logs and failure reasons ---------------------------


def test_passkeys_never_reach_status_logs_or_failure_reasons(http_tracker, test_env):
    import json
    import sys
    import urllib.parse

    from gevent import subprocess  # the stand-in tracker serves while the command runs

    passkey, user, path_key = "Pk1234567890secret", "uk0987654321", "0123456789abcdef0123456789abcdef"
    refusing = f"{http_tracker.base}/refuse?passkey={passkey}"
    failing = f"http://{user}@127.0.0.1:{http_tracker.port}/{path_key}/nothing"
    h1, h2 = hashlib.sha1(b"redact-1").hexdigest(), hashlib.sha1(b"redact-2").hexdigest()
    magnets = [f"magnet:?xt=urn:btih:{h}&tr={urllib.parse.quote(u, safe='')}" for h, u in ((h1, refusing),
                                                                                           (h2, failing))]

    def peercrawl(*args):
        p = subprocess.run([sys.executable, "-m", "crawler", *args], env=test_env, capture_output=True, text=True,
                           timeout=60, check=False)
        return p, p.stdout + p.stderr

    p, out = peercrawl("run", *magnets, "--until-idle")
    assert p.returncode == 0, out[-2000:]
    shown = [out]
    status, text = peercrawl("status", "--json")
    shown.append(text)
    trackers = json.loads(status.stdout)["trackers"]
    assert len(trackers) == 2
    (refuser,) = [x for x in trackers.values() if x["refusals"]]
    assert refuser["refusals"] == 1 and refuser["failures"] == 0
    assert refuser["last_refusal"].startswith("tracker refused: passkey <redacted:")
    (failer,) = [x for x in trackers.values() if x["failures"]]
    assert failer["refusals"] == 0
    text_status = peercrawl("status")[1]
    shown.append(text_status)
    assert "refused" in text_status and " refuses: " in text_status and "is not registered here" in text_status
    for h in (h1, h2):
        t, text = peercrawl("torrent", h, "--json")
        shown.append(text)
        assert json.loads(t.stdout)["last_error"]
    everything = "\n".join(shown)
    assert "<redacted:" in everything and "nothing" in everything  # the URLs are there, their secrets not
    for secret in (passkey, user, path_key):
        assert secret not in everything


@given(
    st.one_of(st.binary(max_size=80), st.lists(st.fixed_dictionaries(
        {b"ip": st.sampled_from([b"1.2.3.4", b"::1", b"nope"]), b"port": st.integers(0, 70000)}), max_size=8)),
    st.binary(max_size=200),
    st.integers(0, 6),
)
def test_a_limited_parse_keeps_what_the_whole_parse_would_have_kept(peers, peers6, limit):
    from crawler.errors import RemoteProtocolError
    from crawler.sources.trackers.http_codec import parse_announce_reply

    body = bencode.encode({b"interval": 60, b"complete": 2, b"incomplete": 3, b"peers": peers, b"peers6": peers6})
    try:
        whole = parse_announce_reply(body)
    except RemoteProtocolError as e:
        whole = e
    try:
        kept = parse_announce_reply(body, limit)
    except RemoteProtocolError as e:
        # Whatever fails cut failed whole, with the same message (unless the whole one first
        # failed on a dictionary entry past the bound, which the cut body no longer holds).
        assert isinstance(whole, RemoteProtocolError)
        assert str(whole) == str(e) or (isinstance(peers, list) and len(peers) > limit)
        return
    if isinstance(whole, RemoteProtocolError):
        # Only a malformed entry past the bound of a dictionary list is never looked at.
        assert isinstance(peers, list) and len(peers) > limit
        return
    assert (kept.interval, kept.complete, kept.incomplete) == (whole.interval, whole.complete, whole.incomplete)
    # Exactly the first `limit` entries of each list, as the codec reads them.
    first = bencode.encode({b"peers": peers[: limit * 6] if isinstance(peers, bytes) else peers[:limit],
                            b"peers6": peers6[: limit * 18]})
    assert kept.peers == parse_announce_reply(first).peers
    raw = len(peers) // 6 if isinstance(peers, bytes) else len(peers)
    assert kept.cut == max(0, raw - limit) + max(0, len(peers6) // 18 - limit)
