"""BEP 15 packets and compact peer lists: round-trips, arbitrary bytes raise only typed errors."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.errors import RemoteProtocolError
from crawler.sources.trackers import udp_codec as u
from crawler.sources.trackers.peers import PeerListError, encode_compact, parse_compact

u32 = st.integers(0, 2**32 - 1)
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
port = st.integers(1, 65535)


@given(st.lists(st.tuples(ipv4, port), max_size=50))
def test_compact_v4_round_trip(peers):
    assert parse_compact(encode_compact(peers)) == tuple(peers)


@given(st.lists(st.tuples(ipv6, port), max_size=20))
def test_compact_v6_round_trip(peers):
    assert parse_compact(encode_compact(peers, socket.AF_INET6), socket.AF_INET6) == tuple(peers)


@given(st.binary(max_size=100), st.sampled_from([socket.AF_INET, socket.AF_INET6]))
def test_compact_arbitrary_bytes(data, family):
    try:
        peers = parse_compact(data, family)
    except PeerListError as e:
        assert "not a multiple" in str(e)
    else:
        assert len(data) % (6 if family == socket.AF_INET else 18) == 0
        assert all(0 < p <= 65535 for _, p in peers)


def test_port_zero_entries_dropped():
    assert parse_compact(encode_compact([("1.2.3.4", 0), ("1.2.3.5", 7)])) == (("1.2.3.5", 7),)


replies = st.one_of(
    st.builds(u.ConnectReply, u32, st.integers(0, 2**64 - 1)),
    # ``cut`` is the client's note of entries it dropped, not on the wire
    st.builds(u.AnnounceReply, u32, u32, u32, u32, st.lists(st.tuples(ipv4, port), max_size=30).map(tuple),
              cut=st.just(0)),
    st.builds(u.ScrapeReply, u32, st.lists(st.builds(u.ScrapeEntry, u32, u32, u32), max_size=10).map(tuple)),
    st.builds(u.ErrorReply, u32, st.text(st.characters().filter(str.isprintable), max_size=50)),
)


@given(replies)
def test_reply_round_trip(reply):
    assert u.parse_reply(u.encode_reply(reply)) == reply


@given(u32, u32, u32, u32, st.lists(st.tuples(ipv6, port), max_size=10).map(tuple))
def test_ipv6_announce_reply_round_trip(tid, interval, le, se, peers):
    r = u.AnnounceReply(tid, interval, le, se, peers)
    assert u.parse_reply(u.encode_reply(r, socket.AF_INET6), socket.AF_INET6) == r


@hsettings(max_examples=500)
@given(st.binary(max_size=120), st.sampled_from([socket.AF_INET, socket.AF_INET6]))
def test_arbitrary_datagrams_raise_only_typed_error(data, family):
    try:
        u.parse_reply(data, family)
    except u.UdpPacketError as e:
        assert isinstance(e, RemoteProtocolError) and str(e)


@given(u32, u32, st.binary(min_size=20, max_size=20), st.binary(min_size=20, max_size=20), port,
       st.integers(-1, 2**31 - 1), st.sampled_from([0, 1, 2, 3]))
def test_announce_request_round_trip(cid, tid, ih, pid, p, nw, ev):
    req = u.AnnounceRequest(cid, tid, ih, pid, p, nw, ev, left=1, key=5)
    data = req.encode()
    assert len(data) == 98
    assert u.AnnounceRequest.decode(data) == req
    # what the client sends, built without the value, is the same packet
    assert u.announce_request(cid, tid, ih, pid, p, nw, ev, left=1, key=5) == data


def test_connect_request_layout():
    assert u.connect_request(0x01020304) == bytes.fromhex("0000041727101980" "00000000" "01020304")


@pytest.mark.parametrize("data, why", [
    (b"\x00\x00\x00\x01\x00\x00", "shorter than the 8-byte header"),
    (bytes.fromhex("00000000 00000001 0102"), "connect reply of 10 bytes"),
    (bytes.fromhex("00000001 00000001 00000001"), "shorter than its 20-byte header"),
    (bytes.fromhex("00000001 00000001 00000001 00000001 00000001") + b"\x01" * 7, "not a multiple of 6"),
    (bytes.fromhex("00000002 00000001 0000"), "not a multiple of 12"),
    (bytes.fromhex("00000009 00000001"), "unknown action 9"),
])
def test_malformations_named(data, why):
    with pytest.raises(u.UdpPacketError, match=why):
        u.parse_reply(data)


def test_peek_routes_before_parsing():
    assert u.peek(u.encode_reply(u.ErrorReply(77, "x"))) == (u.ERROR, 77)


def test_an_error_message_is_one_printable_line():
    r = u.parse_reply(struct.pack(">II", u.ERROR, 7) + "go\naway \x1b[2J\xff".encode("utf-8", "surrogatepass") + b"\xff")
    assert isinstance(r, u.ErrorReply) and r.message == "go\\naway \\x1b[2J\xff\ufffd"
    long = u.parse_reply(struct.pack(">II", u.ERROR, 7) + b"x" * 5000)
    assert len(long.message) == 300 and long.message.endswith("...")
