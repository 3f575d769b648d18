"""HTTP tracker codec: announce URLs, bencoded replies, HTTP/1.1 framing; typed errors only."""

from __future__ import annotations

import socket
import time
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.errors import RemoteProtocolError
from crawler.sources.trackers import http_codec as h
from crawler.sources.trackers.peers import encode_compact

ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
port = st.integers(1, 65535)
counts = st.none() | st.integers(0, 10**6)


@given(st.binary(min_size=20, max_size=20), st.binary(min_size=20, max_size=20))
def test_announce_url_percent_encodes_binary(ih, pid):
    url = h.announce_url("http://t.example/ann?pk=1", ih, pid, 51000, 200, event="stopped")
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query, keep_blank_values=True, encoding="latin-1")
    assert q["info_hash"][0].encode("latin-1") == ih and q["peer_id"][0].encode("latin-1") == pid
    assert q["pk"] == ["1"] and q["compact"] == ["1"] and q["numwant"] == ["200"]
    assert q["event"] == ["stopped"] and q["port"] == ["51000"] and q["left"] == ["1"]


@given(st.lists(st.tuples(ipv4, port), max_size=30), st.lists(st.tuples(ipv6, port), max_size=10),
       counts, counts, counts, counts, st.none() | st.text(st.characters().filter(str.isprintable), max_size=20))
def test_reply_round_trip(p4, p6, interval, mi, complete, incomplete, warning):
    d = {b"peers": encode_compact(p4), b"peers6": encode_compact(p6, socket.AF_INET6)}
    for k, v in ((b"interval", interval), (b"min interval", mi), (b"complete", complete), (b"incomplete", incomplete)):
        if v is not None:
            d[k] = v
    if warning is not None:
        d[b"warning message"] = warning.encode()
    r = h.parse_announce_reply(bencode.encode(d))
    assert r.peers == tuple(p4) + tuple(p6)
    assert (r.interval, r.min_interval, r.complete, r.incomplete, r.warning) == (interval, mi, complete, incomplete, warning)


@given(st.lists(st.tuples(ipv4 | ipv6, port), max_size=10))
def test_dictionary_peers(peers):
    body = bencode.encode({b"peers": [{b"ip": ip.encode(), b"port": p} for ip, p in peers]})
    assert h.parse_announce_reply(body).peers == tuple(peers)


@hsettings(max_examples=400)
@given(st.binary(max_size=200))
def test_arbitrary_bodies_raise_only_typed_errors(data):
    try:
        h.parse_announce_reply(data)
    except RemoteProtocolError as e:
        assert str(e)


@hsettings(max_examples=300)
@given(st.recursive(st.integers(-5, 5) | st.binary(max_size=12),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from([b"peers", b"peers6", b"ip", b"port", b"interval", b"complete"]), c, max_size=4),
                    max_leaves=12))
def test_arbitrary_structures_raise_only_typed_errors(value):
    try:
        h.parse_announce_reply(bencode.encode({b"peers": value} if not isinstance(value, dict) else value))
    except RemoteProtocolError as e:
        assert str(e)


@pytest.mark.parametrize("body, exc, why", [
    (b"d14:failure reason5:nope!e", h.TrackerRefused, "tracker refused: nope!"),
    (b"le", h.HttpReplyError, "not a dictionary"),
    (b"<html>", h.HttpReplyError, "not bencoded"),
    (b"d5:peers3:abce", h.HttpReplyError, "not a multiple of 6"),
    (b"d6:peers6i1ee", h.HttpReplyError, "'peers6' is an integer"),
    (b"d8:intervali-5ee", h.HttpReplyError, "'interval' is not a non-negative integer"),
    (b"d5:peersld2:ip3:abc4:porti1eeee", h.HttpReplyError, "not an IP address"),
    (b"d5:peersli1eee", h.HttpReplyError, "peer 0 is an integer"),
])
def test_malformations_named(body, exc, why):
    with pytest.raises(exc, match=why):
        h.parse_announce_reply(body)


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunked(body: bytes, cuts: list[int]) -> bytes:
    chunks, i = [], 0
    for c in cuts:
        if i < len(body):
            chunks.append(body[i : i + c])
            i += c
    if i < len(body):
        chunks.append(body[i:])
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"


def _framed(body: bytes, framing: str, cuts: list[int]) -> bytes:
    """``body`` in a 200 response framed by Content-Length, chunked coding, or the close."""
    if framing == "length":
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    if framing == "chunked":
        return CHUNKED + _chunked(body, cuts)
    return b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\n" + body


def _feed(raw: bytes, splits: list[int], max_body: int | None = None, close: bool = True) -> h.HttpResponse | None:
    """Feed ``raw`` to a reader in pieces cut at ``splits``, then the close; what a socket would do."""
    reader = h.ResponseReader("t.example", "/announce", max_body)
    at = 0
    for cut in sorted({min(c, len(raw)) for c in splits} - {0} | {len(raw)} - {0}):
        if (r := reader.feed(raw[at:cut])) is not None:
            return r
        at = cut
    return reader.feed(b"") if close else None


framings = st.sampled_from(["length", "chunked", "close"])
splits = st.lists(st.integers(0, 400), max_size=8)


@given(st.binary(max_size=300), framings, st.lists(st.integers(1, 50), max_size=6), splits)
def test_every_framing_round_trips_however_the_bytes_arrive(body, framing, cuts, split):
    resp = _feed(_framed(body, framing, cuts), split, max_body=len(body))
    assert resp.status == 200 and resp.body == body


@given(st.binary(max_size=300), st.sampled_from(["length", "chunked"]), st.lists(st.integers(1, 50), max_size=6),
       st.data())
def test_a_response_cut_short_is_an_error_never_a_partial_body(body, framing, cuts, data):
    raw = _framed(body, framing, cuts)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(h.HttpReplyError, match="incomplete|truncated") as e:
        _feed(raw[:cut], data.draw(splits))
    assert str(e.value).isprintable()


@given(st.binary(min_size=1, max_size=300), framings, st.lists(st.integers(1, 50), max_size=6), splits, st.data())
def test_a_body_past_the_cap_is_refused_as_it_arrives(body, framing, cuts, split, data):
    cap = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(h.ReplyTooLarge, match=f"larger than {cap} bytes"):
        _feed(_framed(body, framing, cuts), split, max_body=cap)


def test_an_endless_body_is_refused_without_the_close():
    reader = h.ResponseReader("t.example", "/", max_body=1000)
    assert reader.feed(CHUNKED) is None
    with pytest.raises(h.ReplyTooLarge, match="larger than 1000 bytes"):
        for _ in range(200):
            assert reader.feed(b"10\r\n" + b"y" * 16 + b"\r\n") is None


def test_chunk_framing_is_bounded_by_count_and_by_bytes():
    reader = h.ResponseReader("t.example", "/", max_body=1 << 20)
    reader.feed(CHUNKED)
    t0 = time.monotonic()
    with pytest.raises(h.HttpReplyError, match=f"chunked body in more than {h.MAX_CHUNKS} chunks"):
        reader.feed(b"1\r\nx\r\n" * (h.MAX_CHUNKS + 1))
    assert time.monotonic() - t0 < 2  # ~0.1 s; 1-byte chunks up to the cap would take 20 s and more
    # Chunk extensions carry no body: 1 byte of body per 60 KiB line, cut at twice the body cap.
    reader = h.ResponseReader("t.example", "/", max_body=100_000)
    reader.feed(CHUNKED)
    with pytest.raises(h.ReplyTooLarge, match=r"larger than 265536 bytes received, \d of them body"):
        for _ in range(10):
            reader.feed(b"1;" + b"e" * 60_000 + b"\r\nx\r\n")


def test_a_content_length_past_the_cap_is_refused_before_its_body():
    reader = h.ResponseReader("t.example", "/", max_body=1000)
    with pytest.raises(h.ReplyTooLarge, match=r"larger than 1000 bytes \(Content-Length 100000000\)"):
        reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")


def test_a_head_past_its_cap_is_refused():
    reader = h.ResponseReader("t.example", "/", max_head=1024)
    with pytest.raises(h.HttpReplyError, match="response head larger than 1024 bytes"):
        reader.feed(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: y\r\n" * 200)


def test_informational_responses_are_skipped():
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + _framed(b"d5:peers0:e", "length", [])
    assert h.parse_response(raw).body == b"d5:peers0:e"


def test_the_request_asks_for_identity_and_close():
    raw = h.request_bytes("t.example:80", "/a?info_hash=%00")
    assert raw.startswith(b"GET /a?info_hash=%00 HTTP/1.1\r\nHost: t.example:80\r\n")
    assert b"Connection: close\r\n" in raw and b"Accept-Encoding: identity\r\n" in raw and raw.endswith(b"\r\n\r\n")


@pytest.mark.parametrize("target", ["/a b", "/\u00fc", ""])
def test_a_target_that_cannot_be_sent_is_a_request_error(target):
    with pytest.raises(h.HttpRequestError, match="request cannot be written"):
        h.request_bytes("t.example", target)


@hsettings(max_examples=400)
@given(st.binary(max_size=200))
def test_arbitrary_http_responses_raise_only_typed_errors(data):
    for raw in (data, CHUNKED + data, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + data):
        try:
            h.parse_response(raw)
        except h.HttpReplyError as e:
            assert str(e).isprintable()


def test_content_length_truncation_named():
    with pytest.raises(h.HttpReplyError, match="body truncated: 3 of 10"):
        h.parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")


@pytest.mark.parametrize("value", ["²", "١٠", "+5", "-5", " ", "5 5", "0x5", "1_0", "9" * 21, "５", "5, 6"])
def test_content_length_is_ascii_digits_only(value):
    raw = f"HTTP/1.1 200 OK\r\nContent-Length: {value}\r\n\r\nabcde".encode()
    with pytest.raises(h.HttpReplyError, match="bad Content-Length|conflicting Content-Length"):
        _feed(raw, [len(raw) // 2], close=False)


@pytest.mark.parametrize("size", [b"0x5", b"+5", b"-5", b"5_0", "٥".encode(), b"", b"f" * 21, b"5 5"])
def test_chunk_sizes_are_ascii_hex_only(size):
    with pytest.raises(h.HttpReplyError, match="bad chunked body: illegal chunk header"):
        h.parse_response(CHUNKED + size + b"\r\nabcde\r\n0\r\n\r\n")


@pytest.mark.parametrize("status", ["٢٠٠", "²００", "20", "2000", "+20"])
def test_status_codes_are_three_ascii_digits(status):
    with pytest.raises(h.HttpReplyError, match="bad status line"):
        h.parse_response(f"HTTP/1.1 {status} OK\r\n\r\n".encode())


@pytest.mark.parametrize("key", [b"interval", b"min interval"])
@pytest.mark.parametrize("value", [2**32, 10**40, int("9" * 64)])
def test_intervals_past_the_field_width_are_clamped(key, value):
    r = h.parse_announce_reply(bencode.encode({key: value, b"peers": b""}))
    got = r.interval if key == b"interval" else r.min_interval
    assert got == h.MAX_INTERVAL
    float(got)  # what the tracker client does with it


@pytest.mark.parametrize("key", [b"complete", b"incomplete"])
def test_counts_past_any_swarm_are_refused(key):
    assert h.parse_announce_reply(bencode.encode({key: h.MAX_COUNT}))  # the largest taken
    with pytest.raises(h.HttpReplyError, match="past any swarm's size"):
        h.parse_announce_reply(bencode.encode({key: h.MAX_COUNT + 1}))


def test_an_integer_past_the_bencode_cap_is_a_reply_error():
    with pytest.raises(h.HttpReplyError, match="not bencoded: integer at offset 12 has 5000 digits"):
        h.parse_announce_reply(b"d8:intervali" + b"9" * 5000 + b"ee")


def test_refusals_and_warnings_are_one_printable_line():
    with pytest.raises(h.TrackerRefused) as e:
        h.parse_announce_reply(bencode.encode({b"failure reason": b"no\r\nX-Injected: 1\x1b[31m"}))
    assert str(e.value) == "tracker refused: no\\r\\nX-Injected: 1\\x1b[31m"
    r = h.parse_announce_reply(bencode.encode({b"warning message": b"w" * 1000 + b"\n"}))
    assert r.warning.isprintable() and len(r.warning) == 300
