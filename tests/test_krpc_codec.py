"""KRPC get_peers / announce_peer and BEP 33 replies: round trips, and hostile bytes give KrpcError or a value."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.sources.dht import krpc_codec as kc

BOUNDED = hsettings(max_examples=300, deadline=timedelta(seconds=2))
SMALL = hsettings(max_examples=120, deadline=timedelta(seconds=2))
ID = bytes(range(20))
IH = bytes(range(20, 40))

ids = st.binary(min_size=20, max_size=20)
tids = st.binary(min_size=1, max_size=kc.MAX_TRANSACTION_ID)
ports = st.integers(1, 65535)
filters = st.none() | st.binary(min_size=256, max_size=256)
nodes4 = st.lists(st.builds(kc.Node, ids, st.ip_addresses(v=4).map(str), ports), max_size=kc.MAX_NODES)
nodes6 = st.lists(st.builds(kc.Node, ids, st.ip_addresses(v=6).map(str), ports), max_size=kc.MAX_NODES)
values = st.lists(st.binary(min_size=6, max_size=6) | st.binary(min_size=18, max_size=18), max_size=100)
# Any bencodable value, nested a little: the junk a hostile node puts anywhere.
junk = st.recursive(
    st.integers(-(2**70), 2**70) | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.binary(max_size=8), inner, max_size=6),
    max_leaves=40,
)


def test_get_peers_query():
    q = bencode.decode(kc.get_peers(b"ab", ID, IH))
    assert q == {b"t": b"ab", b"y": b"q", b"q": b"get_peers", b"ro": 1,
                 b"a": {b"id": ID, b"info_hash": IH, b"scrape": 1}}
    q = bencode.decode(kc.get_peers(b"ab", ID, IH, scrape=False, noseed=True, want=["n4", "n6"], read_only=False))
    assert q[b"a"] == {b"id": ID, b"info_hash": IH, b"noseed": 1, b"want": [b"n4", b"n6"]} and b"ro" not in q


def test_announce_peer_query():
    q = bencode.decode(kc.announce_peer(b"x", ID, IH, 6881, b"tok", seed=True, implied_port=True))
    assert q[b"q"] == b"announce_peer"
    assert q[b"a"] == {b"id": ID, b"info_hash": IH, b"port": 6881, b"token": b"tok", b"seed": 1, b"implied_port": 1}


@pytest.mark.parametrize("call", [
    lambda: kc.get_peers(b"t", ID[:19], IH),
    lambda: kc.get_peers(b"t", ID, IH + b"x"),
    lambda: kc.get_peers(b"t", ID, IH, want=["n5"]),
    lambda: kc.get_peers(b"", ID, IH),
    lambda: kc.get_peers(b"t" * 33, ID, IH),
    lambda: kc.announce_peer(b"t", ID, IH, 65536, b"tok"),
])
def test_our_own_bad_queries_are_value_errors(call):
    with pytest.raises(ValueError):
        call()


@SMALL
@given(tids, ids, nodes4, nodes6, values, filters, filters, st.none() | st.binary(max_size=kc.MAX_TOKEN))
def test_response_round_trip(tid, node_id, n4, n6, vals, sd, pe, token):
    reply = kc.Response(tid, node_id, tuple(n4), tuple(n6), len(vals), sd, pe, token)
    assert kc.decode(kc.response(reply, vals)) == reply


@given(tids, st.integers(-(2**63), 2**63), st.text(st.characters().filter(str.isprintable), max_size=100))
def test_error_round_trip(tid, code, text):
    assert kc.decode(kc.error(kc.ErrorReply(tid, code, text))) == kc.ErrorReply(tid, code, text)


def test_nodes_past_the_cap_are_cut_and_port_zero_dropped():
    many = [kc.Node(ID, f"10.0.{i // 256}.{i % 256}", 1000 + i) for i in range(2000)]  # 52,000 bytes
    r = kc.decode(kc.response(kc.Response(b"t", ID, tuple(many))))
    assert r.nodes == tuple(many[: kc.MAX_NODES])
    zero = kc.Node(ID, "10.0.0.1", 0)
    assert kc.decode(kc.response(kc.Response(b"t", ID, (zero, many[0]), (kc.Node(ID, "::1", 0),)))).nodes == (many[0],)


def _reply(**r) -> bytes:
    return bencode.encode({b"t": b"tt", b"y": b"r", b"r": {b"id": ID, **r}})


@pytest.mark.parametrize(("data", "says"), [
    (_reply(BFsd=bytes(255)), "BFsd is 255 bytes, not a 256-byte"),
    (_reply(BFpe=bytes(257)), "BFpe is 257 bytes"),
    (_reply(BFpe=[bytes(256)]), "BFpe is not a string"),
    (_reply(nodes=bytes(27)), "nodes of 27 bytes is not a multiple of 26"),
    (_reply(nodes6=bytes(26)), "nodes6 of 26 bytes is not a multiple of 38"),
    (_reply(nodes=5), "nodes is not a string"),
    (_reply(values=b"abcdef"), "values is not a list"),
    (_reply(token=bytes(65)), "token is not a string of at most 64"),
    (bencode.encode({b"t": b"tt", b"y": b"r", b"r": {b"id": ID[:19]}}), "20-byte node id"),
    (bencode.encode({b"t": b"tt", b"y": b"r", b"r": [ID]}), "without an r dictionary"),
    (bencode.encode({b"y": b"r", b"r": {b"id": ID}}), "no transaction id"),
    (bencode.encode({b"t": b"t" * 33, b"y": b"r", b"r": {b"id": ID}}), "no transaction id"),
    (bencode.encode({b"t": b"tt", b"y": b"q", b"q": b"ping", b"a": {b"id": ID}}), "a query, not a reply"),
    (bencode.encode({b"t": b"tt", b"y": b"x"}), "neither r nor e"),
    (bencode.encode({b"t": b"tt", b"y": b"e", b"e": [201]}), "a code and a message"),
    (bencode.encode({b"t": b"tt", b"y": b"e", b"e": [b"201", b"no"]}), "a code and a message"),
    (bencode.encode({b"t": b"tt", b"y": b"e", b"e": [201, b"a", b"b"]}), "a code and a message"),
    (bencode.encode([b"t"]), "not a dictionary"),
    (_reply(values=[b"123456"] * 3000), "not one bencoded message: more than 2,000 values"),
    (b"d1:t2:tt1:y1:r1:rd2:id20:" + ID + b"5:other" + b"l" * 100 + b"e" * 100 + b"ee", "nesting deeper than 64"),
    (b"d1:t2:tt1:y1:r1:rd2:id20:" + ID + b"5:other" + b"le" * 3000 + b"ee", "not one bencoded message"),
    (b"d1:t2:tt1:y1:r1:rd2:id20:" + ID + b"5:nodes" + b"l" * 80 + b"e" * 80 + b"ee", "nesting deeper than 64"),
    (_reply(nodes=bytes(26 * 10_000)), "datagram of 260,"),
    (b"x" * (kc.MAX_DATAGRAM + 1), "datagram of 65,536 bytes"),
    (b"", "not one bencoded message: empty input"),
])
def test_hostile_replies_are_refused_in_one_line(data, says):
    with pytest.raises(kc.KrpcError) as e:
        kc.decode(data)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_values_are_counted_up_to_the_budget():
    assert kc.decode(_reply(values=[b"123456"] * 1900)).values == 1900


def test_error_message_is_made_one_line():
    r = kc.decode(bencode.encode({b"t": b"tt", b"y": b"e", b"e": [203, b"bad\n\x1b[31m" + b"x" * 500]}))
    assert r.code == 203 and r.message.startswith("bad\\n\\x1b[31mxxx") and len(r.message) < 220


def _check(data: bytes) -> None:
    """Decoding ``data`` gives a value that respects every cap, or KrpcError; nothing else."""
    try:
        r = kc.decode(data)
    except kc.KrpcError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(r, (kc.Response, kc.ErrorReply))
    if isinstance(r, kc.Response):
        assert len(r.node_id) == 20 and len(r.nodes) <= kc.MAX_NODES and len(r.nodes6) <= kc.MAX_NODES
        assert all(f is None or len(f) == 256 for f in (r.seeds_filter, r.peers_filter))
        assert all(0 < n.port < 65536 for n in r.nodes + r.nodes6)
        assert all(socket.inet_pton(socket.AF_INET, n.ip) for n in r.nodes)


@BOUNDED
@given(st.binary(max_size=2000))
@example(b"d1:t2:aa1:y1:r1:rd2:id20:" + ID + b"ee")
@example(b"d1:t2:aa1:y1:e1:eli201e0:ee")
def test_arbitrary_bytes(data):
    _check(data)


@hsettings(max_examples=200, deadline=timedelta(seconds=2))
@given(
    st.dictionaries(
        st.sampled_from([b"id", b"nodes", b"nodes6", b"values", b"BFsd", b"BFpe", b"token", b"other"]),
        junk
        | st.binary(min_size=250, max_size=262)
        | st.integers(0, 3000).map(lambda n: bytes(n)),
        max_size=8,
    ),
    st.sampled_from([b"r", b"e", b"q", b"x"]),
    junk,
)
def test_structurally_valid_hostile_replies(r, kind, e):
    r.setdefault(b"id", ID)
    _check(bencode.encode({b"t": b"tt", b"y": kind, b"r": r, b"e": e}))


@SMALL
@given(nodes4, st.integers(0, 6000), st.integers(0, 25))
def test_long_nodes_and_values_past_the_caps(n4, extra_nodes, odd):
    blob = kc.compact_nodes(n4) + bytes(26 * extra_nodes) + bytes(odd)
    data = bencode.encode({b"t": b"tt", b"y": b"r", b"r": {b"id": ID, b"nodes": blob}})
    _check(data)
    if odd == 0 and len(data) <= kc.MAX_DATAGRAM:
        assert len(kc.decode(data).nodes) <= kc.MAX_NODES
