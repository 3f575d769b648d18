"""The fast compact-peer parser agrees with ipaddress; a counts-only reply still checks its peer list."""

from __future__ import annotations

import ipaddress
import socket
import struct

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crawler.sources.trackers import peers as p
from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.peers import PeerListError, check_compact, parse_compact


def ipaddress_reading(data: bytes) -> tuple:
    expected = []
    for off in range(0, len(data), 6):
        (port,) = struct.unpack_from(">H", data, off + 4)
        if port:
            expected.append((str(ipaddress.IPv4Address(data[off : off + 4])), port))
    return tuple(expected)


@given(st.binary(max_size=6 * 40).map(lambda b: b[: len(b) - len(b) % 6]))
def test_ipv4_entries_are_ipaddress_canonical_text(data):
    assert parse_compact(data) == ipaddress_reading(data)


# Entries from a few addresses and ports often 0, and lists past the size unpacked by one format of
# their own.
ENTRY = st.tuples(st.sampled_from([bytes([10, 0, 0, i]) for i in range(8)]) | st.binary(min_size=4, max_size=4),
                  st.sampled_from([0, 1, 6881, 65535]) | st.integers(0, 65535))


@given(st.lists(st.lists(ENTRY, max_size=p.WHOLE_FORMS + 60), max_size=4))
def test_ipv4_texts_agree_with_ipaddress_at_any_size(lists):
    for entries in lists:
        data = b"".join(ip + port.to_bytes(2, "big") for ip, port in entries)
        assert parse_compact(data) == ipaddress_reading(data)


@given(st.binary(max_size=100), st.sampled_from([socket.AF_INET, socket.AF_INET6]))
def test_check_compact_agrees_with_parse_compact(data, family):
    try:
        parse_compact(data, family)
        parsed = True
    except PeerListError as e:
        parsed = str(e)
    try:
        check_compact(data, family)
        checked = True
    except PeerListError as e:
        checked = str(e)
    assert parsed == checked


def test_counts_only_reply_reads_counts_and_rejects_a_broken_list():
    reply = u.AnnounceReply(7, 900, 3, 2, (("1.2.3.4", 5), ("5.6.7.8", 9)))
    data = u.encode_reply(reply)
    assert u.parse_reply(data, peers=False) == u.AnnounceReply(7, 900, 3, 2, ())
    assert u.parse_reply(data) == reply
    with pytest.raises(u.UdpPacketError, match="not a multiple of 6"):
        u.parse_reply(data + b"\x01", peers=False)


_OCTETS = st.one_of(st.integers(0, 300).map(str), st.text("0123456789x", max_size=4))


@example("1.2.3.4\x00")
@example("\ud800")
@example("1.2.3.04")
@given(st.one_of(
    st.lists(_OCTETS, min_size=1, max_size=6).map(".".join),  # dotted forms, good and bad
    st.ip_addresses().map(str),
    st.text(max_size=45),
    st.lists(_OCTETS, min_size=4, max_size=4).map(lambda p: " " + ".".join(p) + "\n"),
))
def test_normalize_ip_fast_path_accepts_exactly_what_ipaddress_accepts(text):
    from crawler.counters.ip_forms import canonical_ip, ip_text, normalize_any_ip, normalize_ip
    from geo.locator import _pton  # the locator's own fast path uses the same test

    packed = normalize_ip(text)
    assert packed == normalize_any_ip(text)  # the fast path agrees with ipaddress's
    if packed is not None:
        assert ip_text(packed) == str(ipaddress.ip_address(packed))
        assert canonical_ip(text) == (packed, ip_text(packed))
    fast = None
    try:
        fast = _pton(socket.AF_INET, text)
    except (OSError, TypeError, ValueError):
        pass
    if fast is not None:  # what inet_pton takes is canonical dotted text
        assert str(ipaddress.IPv4Address(fast)) == text


_IP_TEXT = st.one_of(
    st.lists(_OCTETS, min_size=1, max_size=6).map(".".join),
    st.ip_addresses().map(str),
    st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),  # the same IPv4 address spelt as IPv6
    st.text(max_size=45),
)


@given(st.lists(_IP_TEXT, max_size=300))
def test_packed_ips_are_the_distinct_normalized_ips(texts):
    """``packed_ips`` (the swarm record's key, read before any peer is met) takes exactly the IPs
    ``normalize_ip`` takes, each once however it is spelt, past any list size a reply gives."""
    from crawler.counters.ip_forms import normalize_ip, packed_ips

    want = {normalize_ip(t) for t in texts} - {None}
    assert packed_ips(texts) == want
    assert packed_ips(frozenset(texts)) == want


# --- packed pairs (crawler.sources.compact_peers): the same peers without their texts ------------

_V6_ENTRY = st.binary(min_size=16, max_size=16).flatmap(
    lambda ip: st.sampled_from([ip, b"\0" * 10 + b"\xff\xff" + ip[:4]])).flatmap(
    lambda ip: st.integers(0, 65535).map(lambda port: ip + struct.pack(">H", port)))


@given(st.one_of(
    st.tuples(st.lists(ENTRY, max_size=p.WHOLE_FORMS + 60).map(
        lambda es: b"".join(ip + port.to_bytes(2, "big") for ip, port in es)), st.just(socket.AF_INET)),
    st.tuples(st.lists(_V6_ENTRY, max_size=40).map(b"".join), st.just(socket.AF_INET6)),
    st.tuples(st.binary(max_size=6 * p.WHOLE_FORMS + 100), st.sampled_from([socket.AF_INET, socket.AF_INET6]))))
@example((b"\x01\x02\x03\x04\x00\x00", socket.AF_INET))
@example((b"\0" * 10 + b"\xff\xff\x01\x02\x03\x04\x1a\xe1", socket.AF_INET6))
def test_packed_pairs_are_the_texts_peers_packed(case):
    """Any bytes: ``parse_pairs`` fails exactly where ``parse_compact`` does, else gives the same peers
    packed (an IPv4-mapped address as its IPv4), and ``CompactPeers`` of them is the set of their
    texts, its ``ips`` the distinct normalized IPs the recorder would parse from those texts."""
    from crawler.counters.ip_forms import packed_ips
    from crawler.sources.compact_peers import CompactPeers

    data, family = case
    try:
        texts = parse_compact(data, family)
    except PeerListError:
        with pytest.raises(PeerListError):
            p.parse_pairs(data, family)
        return
    pairs = p.parse_pairs(data, family)
    assert len(pairs) == len(texts)
    for (ip, port), (text, tport) in zip(pairs, texts):
        addr = ipaddress.ip_address(text)
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        assert (ip, port) == (addr.packed, tport)
    peers = CompactPeers(pairs)
    assert len(peers) == len(set(pairs))
    assert peers.ips() == packed_ips([t for t, _ in texts])
    if family == socket.AF_INET or all(len(ip) == 16 for ip, _ in pairs):  # where no address was mapped
        assert peers == frozenset(texts) and frozenset(texts) == peers and hash(peers) == hash(frozenset(texts))
        assert set(peers) == set(texts) and all(t in peers for t in texts)
    assert peers == CompactPeers(reversed(pairs)) and (peers | set()) == frozenset(peers)


@given(st.lists(st.tuples(st.sampled_from(["1.2.3.4", b"\x01\x02\x03\x04", "::1"]), st.integers(0, 8)),
                max_size=300), st.integers(0, 8))
def test_the_crawlers_own_entries_are_dropped_by_port_whatever_the_ip_form(peers, port):
    from crawler.sources.trackers.self_filter import SelfFilter

    kept, listed = SelfFilter(port).strip(tuple(peers))
    assert list(kept) == [q for q in peers if q[1] != port]
    assert listed == any(q[1] == port for q in peers)


# Packed as parse_pairs gives them: an IPv4-mapped IPv6 address as its IPv4.
_PAIR = st.tuples((st.sampled_from([bytes([10, 0, 0, i]) for i in range(6)]) | st.binary(min_size=4, max_size=4)
                   | st.binary(min_size=16, max_size=16)).map(lambda ip: ip[12:] if ip[:12] == b"\0" * 10 + b"\xff\xff" else ip),
                  st.integers(1, 65535))


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.lists(_PAIR, max_size=30)), max_size=5))
def test_a_visits_distinct_ips_are_its_peers_ips_whichever_form_each_source_gave(sources):
    """``VisitResult.distinct_ips`` (what the recorder takes) holds the same IPs as ``peer_ips`` (their
    texts) whatever mix of packed and text peers, answered or not, the sources gave."""
    from crawler.counters.ip_forms import PackedIPs, ip_text, packed_ips
    from crawler.sources.compact_peers import CompactPeers
    from crawler.sources.result import SourceResult, VisitResult

    results = []
    for i, (ok, packed, pairs) in enumerate(sources):
        peers = CompactPeers(pairs) if packed else frozenset((ip_text(ip), port) for ip, port in pairs)
        results.append(SourceResult(f"s{i}", ok, peers if ok else frozenset()))
    vr = VisitResult("h", tuple(results))
    got = vr.distinct_ips
    assert packed_ips(got) == packed_ips(list(vr.peer_ips))
    with_peers = [r.peers for r in results if r.ok and r.peers]
    assert isinstance(got, PackedIPs) == all(isinstance(p, CompactPeers) for p in with_peers)
