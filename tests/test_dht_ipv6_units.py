"""The DHT's IPv6 side without a network: ``PEERCRAWL_DHT_LISTEN``, the families kept, and the
address policy over IPv6 nodes (hypothesis over addresses inside and outside each refused range).

For nodes two checks apply: ``addresses.kind_of`` (bootstrap routers, discovery's nodes) and the
session's ``ip_filter`` (every node libtorrent meets). Inside a refused range both refuse (the
forms that carry an IPv4 address by that address); outside them, in global unicast, both allow.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.addresses import kind_of
from crawler.sources.dht import dht_session
from crawler.sources.dht.dht_lookups import Lookup, Target, gather_peers
from crawler.sources.dht_listen import listening

LISTEN = "PEERCRAWL_DHT_LISTEN"


def test_the_default_listens_on_both_families():
    assert Settings.from_env({}).dht_listen == (("0.0.0.0", 0), ("::", 0))
    assert Settings().dht_listen == (("0.0.0.0", 0), ("::", 0))


def test_several_addresses():
    s = Settings.from_env({LISTEN: " 127.0.0.1:6881 , [::1]:6881,[2001:DB8::7]:0 "})
    assert s.dht_listen == (("127.0.0.1", 6881), ("::1", 6881), ("2001:db8::7", 0))


@pytest.mark.parametrize("value, says", [
    ("0.0.0.0:0,host:1", "entry 'host:1': expected an IP address:port"),
    ("0.0.0.0:0,[::]:x", "entry '[::]:x': port of '[::]:x' is not a number"),
    ("[::]:70000", "entry '[::]:70000': port of '[::]:70000' is out of range"),
    ("0.0.0.0:0,[::]:0,0.0.0.0:5", "entry '0.0.0.0:5': 0.0.0.0 is listed twice"),
    ("::", "entry '::': port of '::' is not a number"),
    (" , ", "expected ip:port,..."),
])
def test_a_bad_entry_is_named_in_one_line(value, says):
    with pytest.raises(SettingsError) as e:
        Settings.from_env({LISTEN: value})
    msg = str(e.value)
    assert msg.startswith(f"{LISTEN}: {says}") and "\n" not in msg


addresses = st.lists(st.tuples(st.ip_addresses().map(str), st.integers(0, 65535)), min_size=1, max_size=6,
                     unique_by=lambda a: a[0])


@hsettings(max_examples=300, deadline=None)
@given(addresses)
def test_what_listen_text_writes_parses_back(pairs):
    assert Settings.from_env({LISTEN: listen_text(pairs)}).dht_listen == tuple(pairs)


@hsettings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789abcdef:.[], x%\n\udcff"), max_size=80) | st.text(max_size=300))
def test_any_text_is_addresses_or_a_one_line_error(text):
    try:
        got = Settings.from_env({LISTEN: text}).dht_listen
    except SettingsError as e:
        assert str(e).startswith(LISTEN + ": ") and "\n" not in str(e)
    else:
        assert got and all(ipaddress.ip_address(ip) and 0 <= port <= 65535 for ip, port in got)


def test_the_routers_kept_are_those_of_the_families_listened_on():
    routers = [("127.0.0.5", 6881), ("::1", 6881), ("127.0.0.6", 1)]
    with capture_logs() as logs:
        assert listening((("127.0.0.1", 0),), routers) == ((("127.0.0.1", 0),), [("127.0.0.5", 6881), ("127.0.0.6", 1)])
        assert listening((("::1", 0),), routers) == ((("::1", 0),), [("::1", 6881)])
        assert listening((("0.0.0.0", 0), ("::1", 0)), routers)[1] == routers
    assert logs == []  # what the operator chose is no news


def test_dht_peers_on_port_0_are_nobody_and_ipv6_text_is_canonical():
    class Reply:  # the one method of dht_get_peers_reply_alert the source reads
        def peers(self):
            return [("2001:DB8:0::1", 7000), ("2001:db8::2", 0), ("10.0.0.1", 0), ("10.0.0.2", 6881)]

    lk = Lookup(Target(b"x" * 20, 0.0), 100, 0.0)
    gather_peers(Reply(), [lk])
    assert lk.peers == {("2001:db8::1", 7000), ("10.0.0.2", 6881)}


# --- the address policy over IPv6 nodes -------------------------------------------------------

FILTER = dht_session.ip_filter(False)
OPEN = dht_session.ip_filter(True)


def inside(cidr: str):
    """Random addresses inside ``cidr``."""
    net = ipaddress.IPv6Network(cidr)
    return st.integers(0, net.num_addresses - 1).map(lambda n: ipaddress.IPv6Address(int(net.network_address) + n))


v4s = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address) | st.sampled_from(
    [ipaddress.IPv4Address(a) for a in ("10.1.2.3", "127.0.0.1", "192.168.9.9", "100.64.0.1", "169.254.3.3",
                                          "8.8.8.8", "192.0.0.9", "203.0.113.5", "224.0.0.1", "1.1.1.1")])


def sixtofour(v4: ipaddress.IPv4Address, low: int) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80) | low)


def refused_everywhere(addr: ipaddress.IPv6Address) -> None:
    ip = str(addr)
    assert kind_of(ip) is not None, ip
    assert FILTER.access(ip) == 1, ip
    assert OPEN.access(ip) == 0, ip  # PEERCRAWL_ALLOW_PRIVATE=1 allows it


@hsettings(max_examples=300, deadline=None)
@given(inside("fc00::/7") | inside("fe80::/10") | inside("64:ff9b:1::/48") | inside("::/96") | inside("ff00::/8"))
def test_unique_local_link_local_local_nat64_and_the_rest_are_refused(addr):
    refused_everywhere(addr)


@hsettings(max_examples=300, deadline=None)
@given(inside("64:ff9b::/96") | inside("2001::/32"))
def test_nat64_and_teredo_nodes_are_refused_whatever_ipv4_they_carry(addr):
    # Trackers judge them by the IPv4 inside (tests/test_address_forms.py); a DHT node never
    # needs them: the public DHT reaches IPv4 nodes over IPv4.
    assert FILTER.access(str(addr)) == 1 and OPEN.access(str(addr)) == 0


@hsettings(max_examples=300, deadline=None)
@given(v4s, st.integers(0, 2**80 - 1))
def test_a_6to4_node_is_judged_as_the_ipv4_inside_it(v4, low):
    addr = sixtofour(v4, low)
    assert (kind_of(str(addr)) is None) == (kind_of(str(v4)) is None), (addr, v4)
    assert FILTER.access(str(addr)) == FILTER.access(str(v4)), (addr, v4)


SPECIAL_IN_2000 = [ipaddress.IPv6Network(n) for n in ("2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20")]


@hsettings(max_examples=500, deadline=None)
@given(inside("2000::/3"))
def test_global_unicast_outside_the_special_ranges_is_allowed(addr):
    if any(addr in n for n in SPECIAL_IN_2000):
        refused = kind_of(str(addr)) is not None
        assert FILTER.access(str(addr)) == 1 or not refused  # what the policy refuses, the filter blocks
        return
    assert kind_of(str(addr)) is None and FILTER.access(str(addr)) == 0, addr
