"""Address policy (contract §3) for IPv6 forms that carry an IPv4 address, and site-local; trackers and DHT alike.

6to4, Teredo, NAT64 and IPv4-mapped addresses are judged by the IPv4 address
inside them; the DHT's ip_filter blocks at least every address the tracker
check refuses (a hypothesis property over each form).
"""

from __future__ import annotations

import ipaddress
import os

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.settings import Settings
from crawler.sources import addresses
from crawler.sources.addresses import AddressRefused, check, kind_of
from crawler.sources.dht import dht_session
from crawler.sources.trackers.trackers import Trackers

PRIVATE_V4 = ["10.0.0.1", "127.0.0.1", "192.168.1.1", "172.16.5.4", "169.254.1.1", "100.64.0.1", "0.0.0.1",
              "192.0.2.45", "224.0.0.1", "255.255.255.255"]
PUBLIC_V4 = ["8.8.8.8", "65.54.227.120", "1.1.1.1"]


def sixtofour(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1))


def teredo(server: str, client: str, port: int = 40000) -> str:
    """A Teredo address: 2001:0, server IPv4, flags, port and client IPv4 both stored inverted."""
    s, c = int(ipaddress.IPv4Address(server)), int(ipaddress.IPv4Address(client))
    return str(ipaddress.IPv6Address((0x20010000 << 96) | (s << 64) | (0x8000 << 48)
                                     | ((port ^ 0xFFFF) << 32) | (c ^ 0xFFFFFFFF)))


def nat64(v4: str) -> str:
    return str(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(ipaddress.IPv4Address(v4))))


def mapped(v4: str) -> str:
    return f"::ffff:{v4}"


def test_teredo_builder_matches_pythons_reading():
    assert ipaddress.IPv6Address(teredo("65.54.227.120", "192.0.2.45")).teredo == (
        ipaddress.IPv4Address("65.54.227.120"), ipaddress.IPv4Address("192.0.2.45"))


REFUSED = (
    [(sixtofour(v4), f"6to4 address whose embedded IPv4 {v4} is a") for v4 in PRIVATE_V4]
    + [(teredo(PUBLIC_V4[1], v4), f"Teredo address whose embedded client IPv4 {v4} is a") for v4 in PRIVATE_V4]
    + [(teredo(v4, PUBLIC_V4[0]), f"Teredo address whose embedded server IPv4 {v4} is a") for v4 in PRIVATE_V4]
    + [(nat64(v4), f"NAT64 address whose embedded IPv4 {v4} is a") for v4 in PRIVATE_V4]
    + [(mapped(v4), "address") for v4 in PRIVATE_V4]
    + [("fec0::1", "a site-local address"), ("feff:ffff::1", "a site-local address"),
       ("3fff::1", "a documentation address"), ("64:ff9b:1::a00:1", "reserved"), ("::a00:1", "reserved")]
)
ALLOWED = ([sixtofour(v4) for v4 in PUBLIC_V4] + [teredo(a, b) for a in PUBLIC_V4 for b in PUBLIC_V4]
           + [nat64(v4) for v4 in PUBLIC_V4] + [mapped(v4) for v4 in PUBLIC_V4] + ["2a00:1450::1", "8.8.4.4"])


@pytest.mark.parametrize("ip, why", REFUSED)
def test_forms_refused_by_their_embedded_ipv4(ip, why):
    with pytest.raises(AddressRefused, match="PEERCRAWL_ALLOW_PRIVATE=1") as e:
        check(ip, False, "tracker udp://x:1")
    assert f"tracker udp://x:1 resolves to {ip}, a " in str(e.value) and why in str(e.value)
    check(ip, True, "tracker udp://x:1")  # PEERCRAWL_ALLOW_PRIVATE=1 allows all


@pytest.mark.parametrize("ip", ALLOWED)
def test_forms_with_public_ipv4_allowed(ip):
    assert kind_of(ip) is None
    check(ip, False, "tracker udp://x:1")


def test_dht_filter_blocks_every_refused_form_and_passes_public_6to4():
    f = dht_session.ip_filter(False)
    for ip, _ in REFUSED:
        assert f.access(ip) == 1, ip
    for v4 in PUBLIC_V4:
        assert f.access(sixtofour(v4)) == 0 and f.access(v4) == 0
    assert f.access("2a00:1450::1") == 0
    # Allowing private addresses blocks nothing.
    allow = dht_session.ip_filter(True)
    assert all(allow.access(ip) == 0 for ip, _ in REFUSED)


v4s = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
special_v4 = st.sampled_from(PRIVATE_V4 + PUBLIC_V4 + ["198.18.0.1", "203.0.113.9", "240.0.0.1", "192.0.0.8"])
embedding = st.one_of(
    st.tuples(st.just("6to4"), v4s | special_v4).map(lambda t: sixtofour(t[1])),
    st.tuples(v4s | special_v4, v4s | special_v4, st.integers(0, 65535)).map(lambda t: teredo(*t)),
    (v4s | special_v4).map(nat64),
    (v4s | special_v4).map(mapped),
    v4s, special_v4,
    st.ip_addresses(v=6).map(str),
    st.integers(0, 2**118 - 1).map(lambda n: str(ipaddress.IPv6Address((0xFEC << 116) | n))),  # fec0::/10 and more
)


@hsettings(max_examples=600, deadline=None)
@given(embedding)
def test_dht_blocks_whatever_trackers_refuse(ip):
    if kind_of(ip) is not None:
        assert _FILTER.access(ip) == 1, (ip, kind_of(ip))


_FILTER = dht_session.ip_filter(False)


def test_a_real_dht_session_applies_the_filter():
    session = dht_session.new_session(
        Settings(dht_listen=(("127.0.0.11", 0),), allow_private=False, dht_bootstrap=()), [])
    try:
        f = session.get_ip_filter()
        assert f.access(sixtofour("10.0.0.1")) == 1 and f.access(teredo("8.8.8.8", "8.8.4.4")) == 1
        assert f.access("fec0::1") == 1 and f.access(sixtofour("8.8.8.8")) == 0
    finally:
        del session


@pytest.mark.parametrize("ip", [sixtofour("127.0.0.1"), teredo("8.8.8.8", "10.0.0.1"), "fec0::1",
                                nat64("192.168.0.1")])
@pytest.mark.parametrize("scheme", ["udp", "http"])
def test_trackers_refuse_the_forms_without_traffic(settings, client, keys, ip, scheme):
    t = Trackers(settings.replace(allow_private=False), client, keys)
    try:
        r = t.announce(f"{scheme}://[{ip}]:6969/announce", os.urandom(20).hex())
    finally:
        t.close()
    assert not r.ok and f"resolves to {ip}, a " in r.error and "PEERCRAWL_ALLOW_PRIVATE=1" in r.error
    assert t.udp.connects_sent == 0


def test_hostile_host_names_are_typed_without_a_resolver_traceback(capfd):
    for host in ["a\udcffb", "x" * 300 + ".example", "a..b"]:
        with pytest.raises(addresses.HostUnresolved, match="cannot resolve"):
            addresses.resolve(host, 80, lambda ip, what: None, "tracker")
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("ip", [sixtofour("10.1.2.3"), teredo("8.8.8.8", "172.16.0.9"), "fec0::5", nat64("127.0.0.1")])
def test_dht_bootstrap_nodes_get_the_same_check(ip):
    with pytest.raises(AddressRefused, match=f"DHT bootstrap node {ip}:6881 resolves to {ip}, a "):
        dht_session.resolve_bootstrap(((ip, 6881),), allow_private=False)
    assert dht_session.resolve_bootstrap(((ip, 6881),), allow_private=True) == [(ip, 6881)]
