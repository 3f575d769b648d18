"""The fast compact-peer parser agrees with ipaddress; a counts-only reply still checks its peer list."""

from __future__ import annotations

import ipaddress
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.sources import udp_codec as u
from crawler.sources.peers import PeerListError, check_compact, parse_compact


@given(st.binary(max_size=6 * 40).map(lambda b: b[: len(b) - len(b) % 6]))
def test_ipv4_entries_are_ipaddress_canonical_text(data):
    expected = []
    for off in range(0, len(data), 6):
        (port,) = struct.unpack_from(">H", data, off + 4)
        if port:
            expected.append((str(ipaddress.IPv4Address(data[off : off + 4])), port))
    assert parse_compact(data) == tuple(expected)


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
