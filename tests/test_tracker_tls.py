"""https trackers: certificates verified, a real tracker behind TLS, redirects, stalled handshakes."""

from __future__ import annotations

import os
import time

import gevent
import pytest
from gevent.server import StreamServer

from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.sources import addresses
from crawler.sources.trackers.trackers import Trackers
from tests.hostile import GOOD_PEERS, HostileHttpTracker
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)
from tests.tls_trackers import (
    TRACKER_NAME,
    Pki,
    StalledTls,
    TlsFront,
    make_pki,
    resolver_for,
    tls_server_context,
)

RESOLVE = resolver_for({TRACKER_NAME: ["127.0.0.1"], "other.test": ["127.0.0.1"]})


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    """A throwaway CA and certificates, generated for this module (never committed)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def _hash() -> str:
    return os.urandom(20).hex()


@pytest.fixture
def make_trackers(settings, client, keys):
    made = []

    def make(ca=None, **kw) -> Trackers:
        # udp_timeout bounds the "stopped" announce; backoff after many
        # failures, so one test's faults do not bench the tracker.
        s = settings.replace(tracker_ca_file=ca, udp_timeout=1.0, http_timeout=5.0, tracker_backoff_after=1000)
        t = Trackers(s, client, keys, resolver=RESOLVE, **kw)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


@pytest.fixture
def tls_hostile(pki):
    t = HostileHttpTracker(tls=tls_server_context(pki.cert, pki.key))
    yield t
    t.close()


@pytest.fixture
def plain_hostile():
    t = HostileHttpTracker()
    yield t
    t.close()


def test_https_announce_to_a_real_tracker_returns_exactly_its_peers(opentracker, pki, make_trackers):  # noqa: F811
    ih, empty = _hash(), _hash()
    ot = opentracker([ih, empty])
    expected = set()
    for i in range(6):
        ot.announce_from(peer_address(i), ih, 26000 + i, left=0 if i < 2 else 50)  # 2 seeders, 4 leechers
        expected.add((peer_address(i), 26000 + i))
    front = TlsFront(ot.port, tls_server_context(pki.cert, pki.key))
    try:
        t = make_trackers(ca=pki.ca)
        url = f"https://{TRACKER_NAME}:{front.port}/announce"
        r = t.announce(url, ih)
        assert r.ok, r.error
        assert set(r.peers) == expected
        assert (r.seeders, r.leechers) == (2, 4)
        # The crawler withdrew over https too: a torrent nobody announced stays at 0.
        for _ in range(2):
            z = t.announce(url, empty)
            assert z.ok and z.peers == frozenset() and (z.seeders, z.leechers) == (0, 0)
    finally:
        front.close()


def test_certificate_from_an_untrusted_ca_is_a_typed_failure(tls_hostile, pki, make_trackers):
    url = f"https://{TRACKER_NAME}:{tls_hostile.port}/good"
    # Default trust store only: the throwaway CA is unknown.
    r = make_trackers().announce(url, _hash())
    assert not r.ok
    assert r.error.startswith(f"TrackerTlsError: tracker https://{TRACKER_NAME}:{tls_hostile.port}: "
                              "certificate does not verify (unable to get local issuer certificate)")
    assert "PEERCRAWL_TRACKER_CA_FILE" in r.error
    # Trusting the CA through the setting makes the same tracker answer.
    ok = make_trackers(ca=pki.ca).announce(url, _hash())
    assert ok.ok and set(ok.peers) >= set(GOOD_PEERS)


def test_certificate_for_another_name_or_self_signed_is_a_typed_failure(pki, make_trackers):
    t = make_trackers(ca=pki.ca)
    good = HostileHttpTracker(tls=tls_server_context(pki.cert, pki.key))
    rogue = HostileHttpTracker(tls=tls_server_context(pki.rogue_cert, pki.rogue_key))
    try:
        r = t.announce(f"https://other.test:{good.port}/good", _hash())
        assert not r.ok and "TrackerTlsError" in r.error and "certificate does not verify (Hostname mismatch" in r.error
        r = t.announce(f"https://{TRACKER_NAME}:{rogue.port}/good", _hash())
        assert not r.ok and "TrackerTlsError" in r.error and "self-signed certificate" in r.error
        assert t.announce(f"https://{TRACKER_NAME}:{good.port}/good", _hash()).ok
    finally:
        good.close()
        rogue.close()


def test_plain_http_on_an_https_url_is_a_typed_handshake_failure(make_trackers):
    def plain(sock, addr):
        sock.recv(4096)  # the ClientHello, answered in plain HTTP
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        sock.close()

    server = StreamServer(("127.0.0.1", 0), plain)
    server.start()
    try:
        r = make_trackers().announce(f"https://127.0.0.1:{server.server_port}/good", _hash(), time.monotonic() + 3)
    finally:
        server.stop(timeout=0.1)
    assert not r.ok and r.error.startswith("TrackerTlsError: ") and "TLS handshake failed" in r.error


def test_http_redirect_to_https_is_followed_and_verified(plain_hostile, tls_hostile, pki, make_trackers):
    target = f"https://{TRACKER_NAME}:{tls_hostile.port}/good"
    url = f"{plain_hostile.base}/redirect?to={target}"
    ok = make_trackers(ca=pki.ca).announce(url, _hash())
    assert ok.ok, ok.error
    assert set(ok.peers) == set(GOOD_PEERS) | {("::1", 3333)}
    # The redirect does not weaken verification.
    bad = make_trackers().announce(url, _hash())
    assert not bad.ok and "certificate does not verify" in bad.error


def test_https_redirect_to_a_private_address_is_refused(tls_hostile, plain_hostile, pki, make_trackers):
    # 127.0.0.1 plays the public internet; every other address gets the real policy (private off).
    def public_127_0_0_1(ip, what):
        if ip != "127.0.0.1":
            addresses.check(ip, False, what)

    t = make_trackers(ca=pki.ca, address_check=public_127_0_0_1)
    r = t.announce(f"{tls_hostile.base}/redirect?to=http://127.0.0.2:{plain_hostile.port}/good", _hash())
    assert not r.ok and "127.0.0.2, a loopback address" in r.error
    r = t.announce(f"{tls_hostile.base}/redirect?to=https://127.0.0.2:{tls_hostile.port}/good", _hash())
    assert not r.ok and "127.0.0.2, a loopback address" in r.error
    ok = t.announce(f"{tls_hostile.base}/redirect?to={plain_hostile.base}/good", _hash())
    assert ok.ok, ok.error
    # Three redirects are allowed, across schemes; the fourth is not.
    hop = f"{tls_hostile.base}/good"
    for base in (plain_hostile.base, tls_hostile.base, plain_hostile.base):
        hop = f"{base}/redirect?to={hop}"
    assert t.announce(hop, _hash()).ok
    r = t.announce(f"{tls_hostile.base}/redirect?to={hop}", _hash())
    assert not r.ok and "more than 3 redirects" in r.error


def test_stalled_tls_handshake_fails_within_the_deadline_without_blocking_others(
    plain_hostile, make_trackers
):
    stalled = StalledTls()
    try:
        t = make_trackers()
        url = f"https://127.0.0.1:{stalled.port}/announce"
        # Served while a handshake stalls: the hub is not blocked. The stalled
        # announce's deadline is far off, so this holds however slow the
        # machine is; a blocked hub would serve nothing until it ended.
        slow = gevent.spawn(t.announce, url, _hash(), time.monotonic() + 120)
        with gevent.Timeout(30):
            while stalled.accepted < 1:
                gevent.sleep(0.01)
        fast = [gevent.spawn(t.announce, f"{plain_hostile.base}/good", _hash()) for _ in range(5)]
        gevent.joinall(fast, timeout=60)
        assert all(g.value is not None and g.value.ok for g in fast)
        assert not slow.ready()
        slow.kill()
        # The deadline ends a stalled handshake: not before it, and before the
        # 5 s read timeout (make_trackers) would.
        t0 = time.monotonic()
        r = t.announce(url, _hash(), t0 + 1.0)
        elapsed = time.monotonic() - t0
        assert stalled.accepted == 2
        assert not r.ok and r.error.startswith("TrackerTimeout: ")
        assert 0.9 < elapsed < 5.0
    finally:
        stalled.close()


def test_ca_file_setting_is_checked_at_start(tmp_path, settings, client, keys, pki):
    with pytest.raises(SettingsError, match=r"^PEERCRAWL_TRACKER_CA_FILE: no such file"):
        Settings.from_env({"PEERCRAWL_TRACKER_CA_FILE": str(tmp_path / "missing.pem")})
    assert Settings.from_env({"PEERCRAWL_TRACKER_CA_FILE": str(pki.ca)}).tracker_ca_file == pki.ca
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(SettingsError, match=r"^PEERCRAWL_TRACKER_CA_FILE: cannot load CA certificates from "):
        Trackers(settings.replace(tracker_ca_file=junk), client, keys)
