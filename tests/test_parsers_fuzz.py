"""Every parser of untrusted bytes, fuzzed past its caps: only the typed errors ever escape.

bencode (BencodeError), BEP 15 replies (UdpPacketError), HTTP response framing
and announce replies (HttpReplyError, TrackerRefused: RemoteProtocolError),
and ITEMs as ``add`` reads them (ItemError, one printable line). Inputs are
built from hostile pieces (numbers of every length and script, signs, hex
prefixes, nesting past MAX_DEPTH, integers past MAX_INT_DIGITS, counts past
MAX_COUNT, bodies shorter and longer than announced) rather than uniform
noise, which rarely gets past the first byte. Each test is bounded by
max_examples and a deadline so the suite stays fast.
"""

from __future__ import annotations

import io
import socket
import struct
from datetime import timedelta

import pytest
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.errors import ItemError, RemoteProtocolError
from crawler.queue.torrent_record import HISTORY_ENTRY, NOT_REPORTED
from crawler.queue.torrent_record import unpack_history as history
from crawler.sources.trackers import http_codec as h
from crawler.sources.trackers import http_scrape as hs
from crawler.sources.trackers import udp_codec as u
from crawler.torrents.intake import item_sources
from crawler.torrents.items import MAX_TORRENT_FILE, parse_items, parse_torrent

BOUNDED = hsettings(max_examples=300, deadline=timedelta(seconds=2))
SMALL = hsettings(max_examples=120, deadline=timedelta(seconds=2))

# --- hostile pieces ----------------------------------------------------------

ascii_digits = st.integers(0, bencode.MAX_INT_DIGITS * 3).map(lambda n: "9" * n)
odd_digits = st.text(st.sampled_from("0123456789²³¹١٢٣０１２⁹٩߉๑"), max_size=8)
number_text = st.one_of(
    ascii_digits, odd_digits,
    st.integers(-(10**80), 10**80).map(str),
    st.sampled_from(["", "-", "+1", "-0", "0x10", "1_0", " 1", "1 ", "00", "1e3", "inf", "nan"]),
    st.integers(0, 2**70).map(lambda n: f"{n:x}"),
)
number_bytes = number_text.map(lambda t: t.encode("utf-8"))


def _bencode_tokens():
    token = st.one_of(
        st.sampled_from([b"i", b"e", b"l", b"d", b":", b"le", b"de", b"0:", b"1:a", b"i0e", b"4:info"]),
        number_bytes.map(lambda n: b"i" + n + b"e"),
        number_bytes.map(lambda n: n + b":"),
        st.binary(max_size=8),
    )
    return st.lists(token, max_size=40).map(b"".join)


nested = st.integers(0, bencode.MAX_DEPTH * 2).flatmap(
    lambda d: st.sampled_from([b"l", b"d1:a"]).map(lambda o: o * d + b"i1e" + b"e" * d))


def _only_bencode_errors(data: bytes) -> None:
    try:
        bencode.decode(data)
    except bencode.BencodeError as e:
        assert str(e).isprintable()
    try:
        bencode.decode_prefix(data, 0)
    except bencode.BencodeError:
        pass


# --- bencode -----------------------------------------------------------------


@BOUNDED
@given(_bencode_tokens() | nested | st.binary(max_size=300))
def test_bencode_raises_only_bencode_errors(data):
    _only_bencode_errors(data)


@SMALL
@given(st.integers(bencode.MAX_INT_DIGITS + 1, 20_000), st.sampled_from([b"i", b"i-", b""]))
def test_bencode_numbers_past_the_cap(n, prefix):
    data = prefix + b"7" * n + (b"e" if prefix else b":")
    try:
        bencode.decode(data)
    except bencode.BencodeError as e:
        assert "more than" in str(e)
    else:
        raise AssertionError("a number past MAX_INT_DIGITS was accepted")


# --- bencode: what a schema keeps, and the budget -------------------------------

KEY_NAMES = [b"a", b"b", b"ip", b"port", b"peers", b"info"]
tree = st.recursive(
    st.integers(-(10**30), 10**30) | st.binary(max_size=12),
    lambda c: st.lists(c, max_size=6) | st.dictionaries(st.sampled_from(KEY_NAMES), c, max_size=4),
    max_leaves=40,
)


def _schemas():
    """Random schemas: every kind, limits below and past list lengths, Each over lists of lists."""
    base = st.sampled_from([bencode.KEEP, bencode.LEAF, bencode.SKIP, "each", "each2"])
    return st.recursive(base, lambda c: st.one_of(
        st.tuples(c, st.none() | st.integers(0, 8)).map(lambda t: bencode.Items(*t)),
        st.dictionaries(st.sampled_from(KEY_NAMES), c, max_size=3).map(bencode.Keys),
    ), max_leaves=6)


def _values(v) -> int:
    """How many values bencode counts in ``v``: each integer, string, list, dictionary and key."""
    if isinstance(v, list):
        return 1 + sum(map(_values, v))
    if isinstance(v, dict):
        return 1 + len(v) + sum(map(_values, v.values()))
    return 1


def _skipped(v):
    return {int: bencode.INTEGER, bytes: bencode.STRING, list: bencode.LIST, dict: bencode.DICTIONARY}[type(v)]


def _model(v, schema, calls: list):
    """What ``schema`` keeps of the fully decoded ``v``, built by hand: the reference of the decoder."""
    if schema is bencode.KEEP:
        return v
    if schema in ("each", "each2"):
        if isinstance(v, list):
            for x in v:
                if schema == "each" and not isinstance(x, (list, dict)):
                    calls.append(x)
                elif schema == "each2" and isinstance(x, list):
                    _model(x, "each", calls)
            return None
        return _skipped(v)
    if isinstance(v, list):
        if isinstance(schema, bencode.Items):
            limit = len(v) if schema.limit is None else schema.limit
            return ([_model(x, schema.item, calls) for x in v[:limit]], max(0, len(v) - limit))
        return bencode.LIST
    if isinstance(v, dict):
        if isinstance(schema, bencode.Keys):
            return {k: _model(x, schema.fields[k], calls) for k, x in v.items() if k in schema.fields}
        return bencode.DICTIONARY
    return _skipped(v) if schema is bencode.SKIP else v


def _real(schema, calls: list):
    """The schema the decoder takes for a test one ("each": leaves into ``calls``)."""
    if schema == "each":
        return bencode.Each(calls.append)
    if schema == "each2":
        return bencode.Each(bencode.Each(calls.append))
    if isinstance(schema, bencode.Items):
        return bencode.Items(_real(schema.item, calls), schema.limit)
    if isinstance(schema, bencode.Keys):
        return bencode.Keys({k: _real(x, calls) for k, x in schema.fields.items()})
    return schema


def _plain(got):
    """A decode's result in the model's terms (a Cut as (items, cut))."""
    if isinstance(got, bencode.Cut):
        return ([_plain(x) for x in got], got.cut)
    if isinstance(got, dict):
        return {k: _plain(x) for k, x in got.items()}
    if isinstance(got, list):
        return [_plain(x) for x in got]
    return got


@BOUNDED
@given(tree, _schemas())
def test_a_schema_keeps_exactly_what_it_names(v, schema):
    # Dictionary keys as encode sorts them: the model walks them in that order too.
    v = bencode.decode(bencode.encode(v), max_values=10**6)
    want_calls: list = []
    want = _model(v, schema, want_calls)
    calls: list = []
    got = bencode.decode(bencode.encode(v), _real(schema, calls), max_values=10**6)
    assert _plain(got) == want and calls == want_calls


@BOUNDED
@given(tree, _schemas(), st.integers(-3, 3))
def test_the_budget_counts_every_value_kept_or_not(v, schema, off):
    # Past the budget by a few values, at it, or under it: whatever the schema keeps.
    n = _values(v)
    budget = max(0, n + off)
    try:
        bencode.decode(bencode.encode(v), _real(schema, []), max_values=budget)
    except bencode.TooManyValues as e:
        assert n > budget and e.limit == budget and str(e).isprintable()
    else:
        assert n <= budget


@BOUNDED
@given(_bencode_tokens() | nested | st.binary(max_size=300))
def test_checking_without_keeping_finds_the_same_faults_as_decoding(data):
    # A skipped value is checked as a kept one is: same message, bar duplicate keys (not checked
    # where no value is kept). The budget likewise, in both.
    def outcome(schema):
        try:
            bencode.decode(data, schema, max_values=50)
        except bencode.BencodeError as e:
            return str(e)
        return None

    kept, skipped = outcome(bencode.KEEP), outcome(bencode.SKIP)
    if kept is not None and "duplicate dictionary key" in kept:
        return
    assert skipped == kept
    if data[:1] == b"d":
        assert outcome(bencode.Keys({})) == kept


@SMALL
@given(st.integers(0, bencode.MAX_DEPTH * 2), st.sampled_from([b"l", b"d1:a"]),
       st.sampled_from([bencode.KEEP, bencode.SKIP, bencode.Keys({b"x": bencode.KEEP}),
                        bencode.Keys({b"x": bencode.Items(bencode.SKIP)})]))
@example(bencode.MAX_DEPTH, b"l", bencode.SKIP).via("the deepest allowed")
@example(bencode.MAX_DEPTH + 1, b"l", bencode.SKIP).via("one deeper")
@example(bencode.MAX_DEPTH + 1, b"d1:a", bencode.KEEP).via("one deeper")
def test_nesting_past_the_cap_is_refused_kept_or_skipped(depth, opener, schema):
    # The outer dictionary is at depth 0, so the deepest container is at ``depth``.
    data = b"d1:x" + opener * depth + b"i1e" + b"e" * depth + b"e"
    try:
        bencode.decode(data, schema)
    except bencode.BencodeError as e:
        assert "nesting deeper than" in str(e) and depth > bencode.MAX_DEPTH
    else:
        assert depth <= bencode.MAX_DEPTH


@SMALL
@given(st.integers(0, 30), st.integers(0, 40), st.integers(0, 3))
def test_a_peer_list_past_the_limit_is_counted_not_kept(limit, n, junk):
    # Entries past the limit may be anything well-formed (never looked at); the reply's budget
    # still counts them.
    good = [{b"ip": b"10.0.0.%d" % (i % 250), b"port": 1 + i, b"peer id": b"x" * 20} for i in range(n)]
    tail = [[b"junk"] * junk, {b"ip": [1, 2]}, 7][: junk]
    r = h.parse_announce_reply(bencode.encode({b"peers": good + tail if n >= limit else good}), limit)
    assert r.peers == tuple((f"10.0.0.{i % 250}", 1 + i) for i in range(min(n, limit)))
    assert r.cut == max(0, n + (len(tail) if n >= limit else 0) - limit)


# --- magnets and .torrent trackers: the cap applied while reading ---------------------------------

GOOD_URLS = [f"udp://t{i}.example:{i + 1}/announce" for i in range(12)]
url_pool = st.sampled_from(GOOD_URLS + ["wss://x/y", "udp://h:99999/a", ""])


@BOUNDED
@given(st.lists(url_pool, max_size=40), st.integers(1, 8),
       st.lists(st.sampled_from(["0" * 40, "1" * 40, "a" * 40, "urn:btmh"]), min_size=1, max_size=6))
def test_magnet_trackers_are_the_first_cap_distinct_and_the_rest_counted(urls, cap, topics):
    from urllib.parse import quote

    m = "magnet:?" + "&".join(
        [("xt=urn:btmh:1220" + "ab" * 32) if t == "urn:btmh" else f"xt=urn:btih:{t}" for t in topics]
        + ["tr=" + quote(u, safe="") for u in urls])
    hashes = list(dict.fromkeys(t for t in topics if t != "urn:btmh"))
    # The model: read in order until cap distinct are kept (a bad one before that refuses the
    # magnet); after, each entry not written as a kept one is counted.
    kept: dict[str, None] = {}
    dropped, bad = 0, False
    for url in urls:
        if len(kept) >= cap:
            dropped += url not in kept
        elif url in GOOD_URLS:
            kept[url] = None
        else:
            bad = True
            break
    try:
        parsed = parse_items(m, None, cap)
    except ItemError as e:
        _one_line_item_error(e)
        assert bad or not hashes
        return
    assert not bad and [i.info_hash for i in parsed.items] == hashes
    assert all(i.trackers == tuple(kept) for i in parsed.items) and parsed.trackers_dropped == dropped


tier = st.lists(st.one_of(url_pool.map(str.encode), st.integers(0, 3), st.just([b"udp://deep.example:1/a"])),
                max_size=5)


@BOUNDED
@given(st.none() | url_pool.map(str.encode), st.lists(tier | st.just(b"udp://flat.example:1/a"), max_size=12),
       st.integers(1, 8))
def test_torrent_trackers_are_the_first_cap_usable_ones_announce_first(announce, tiers, cap):
    info = {b"name": b"x", b"piece length": 16384, b"pieces": b"\0" * 20, b"length": 1}
    d = {b"info": info, b"announce-list": tiers}
    if announce is not None:
        d[b"announce"] = announce
    # Only strings at the second level of announce-list are trackers; unusable ones are left out.
    listed = [announce] + [u for t in tiers if isinstance(t, list) for u in t if isinstance(u, bytes)]
    usable = [u.decode() for u in listed if u is not None and u.decode() in GOOD_URLS]
    (item,) = parse_torrent(bencode.encode(d), "x.torrent", cap).items
    assert item.trackers == tuple(dict.fromkeys(usable))[:cap]


# --- BEP 15 replies ----------------------------------------------------------


udp_heads = st.tuples(st.integers(0, 6), st.integers(0, 2**32 - 1)).map(lambda t: struct.pack(">II", *t))


@BOUNDED
@given(udp_heads, st.binary(max_size=2100), st.sampled_from([socket.AF_INET, socket.AF_INET6]), st.booleans())
def test_udp_replies_raise_only_packet_errors(head, rest, family, peers):
    for data in (head + rest, head[: len(rest) % 9] , rest):
        try:
            u.parse_reply(data, family, peers=peers)
        except u.UdpPacketError as e:
            assert str(e).isprintable()
        try:
            u.AnnounceRequest.decode(data)
        except u.UdpPacketError:
            pass


# --- HTTP framing and announce replies ----------------------------------------

status_line = st.one_of(
    st.tuples(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "ICY", ""]), number_text,
              st.sampled_from(["OK", "", "Found"])).map(lambda t: " ".join(t)),
    st.just("HTTP/1.1 200 OK"),
)
header = st.one_of(
    number_text.map(lambda n: f"Content-Length: {n}"),
    st.sampled_from(["Transfer-Encoding: chunked", "Transfer-Encoding: gzip, chunked", "Location: /x",
                     "Bad header", ": empty name", " Folded: x", "X: \x00"]),
    st.text(max_size=30).filter(lambda t: "\r\n" not in t),
)
chunk = st.tuples(number_bytes | st.binary(max_size=4), st.binary(max_size=40)).map(
    lambda t: t[0] + b"\r\n" + t[1] + b"\r\n")
body = st.one_of(st.binary(max_size=300), st.lists(chunk, max_size=6).map(lambda c: b"".join(c) + b"0\r\n\r\n"))


def _response(line: str, headers: list[str], payload: bytes) -> bytes:
    return "\r\n".join([line, *headers]).encode("latin-1", "replace") + b"\r\n\r\n" + payload


def _read_like_the_client(raw: bytes, cut: int, max_body: int) -> None:
    """What ``http_client._exchange`` does with bytes arriving in two pieces, then the close."""
    reader = h.ResponseReader("tracker.example", "/announce", max_body)
    for piece in [p for p in (raw[:cut], raw[cut:]) if p] + [b""]:  # b"": the close, and only then
        if reader.feed(piece) is not None:
            return


@BOUNDED
@given(status_line, st.lists(header, max_size=5), body, st.integers(0, 400), st.integers(0, 400))
def test_http_framing_raises_only_reply_errors(line, headers, payload, cut, max_body):
    raw = _response(line, headers, payload)
    try:
        _read_like_the_client(raw, cut, max_body)
    except h.HttpReplyError as e:  # ReplyTooLarge is one
        assert str(e).isprintable()
    for data in (payload, raw[:cut]):
        try:
            h.parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + data)
        except h.HttpReplyError as e:
            assert str(e).isprintable()


big = st.one_of(st.integers(-(2**40), 2**40), st.integers(h.MAX_COUNT - 2, h.MAX_COUNT + 2),
                st.integers(10**60, 10**70), st.binary(max_size=10))
reply_value = st.recursive(
    big | st.binary(max_size=30),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from([b"ip", b"port", b"peer id"]), c, max_size=3),
    max_leaves=10,
)
reply = st.dictionaries(
    st.sampled_from([b"interval", b"min interval", b"complete", b"incomplete", b"peers", b"peers6",
                     b"failure reason", b"warning message"]), reply_value, max_size=6)


@BOUNDED
@given(reply)
def test_announce_replies_raise_only_remote_errors(d):
    try:
        r = h.parse_announce_reply(bencode.encode(d))
    except RemoteProtocolError as e:
        assert str(e).isprintable() or isinstance(e, h.TrackerRefused)
        return
    for v in (r.interval, r.min_interval):
        assert v is None or 0 <= v <= h.MAX_INTERVAL
        float(v or 0)
    for v in (r.complete, r.incomplete):
        assert v is None or 0 <= v <= h.MAX_COUNT


# --- HTTP scrape replies (BEP 48) -----------------------------------------------

ASKED = [bytes([i]) * 20 for i in range(3)]
counts_value = st.recursive(big | st.binary(max_size=20), lambda c: st.lists(c, max_size=3), max_leaves=6)
scrape_entry = st.dictionaries(st.sampled_from([b"complete", b"incomplete", b"downloaded", b"name"]),
                               counts_value, max_size=4) | counts_value
scrape_files = st.dictionaries(st.sampled_from(ASKED) | st.binary(min_size=20, max_size=20), scrape_entry,
                               max_size=4) | counts_value
scrape_reply = st.dictionaries(st.sampled_from([b"files", b"failure reason", b"flags"]), scrape_files, max_size=3)


@BOUNDED
@given(scrape_reply, st.lists(st.sampled_from(ASKED), min_size=1, max_size=3, unique=True))
def test_scrape_replies_raise_only_remote_errors_and_keep_only_whole_counts_of_asked_torrents(d, asked):
    try:
        found = hs.parse_scrape_reply(bencode.encode(d), asked)
    except RemoteProtocolError as e:
        assert str(e).isprintable() or isinstance(e, h.TrackerRefused)
        return
    assert set(found) <= set(asked)
    for c in found.values():
        assert all(isinstance(x, int) and 0 <= x <= hs.MAX_COUNT for x in (c.seeders, c.leechers, c.completed))


@pytest.mark.parametrize("entries", [10, h.REPLY_MAX_VALUES // 2 + 1, h.REPLY_MAX_VALUES + 1])
def test_a_scrape_reply_past_the_value_budget_is_refused_without_decoding_it(entries):
    # every entry is two values at least (its key and its dictionary): past half the budget, refused
    body = b"d5:filesd" + b"".join(b"20:" + i.to_bytes(20, "big") + b"de" for i in range(1000, 1000 + entries)) + b"ee"
    if entries * 2 <= h.REPLY_MAX_VALUES:
        assert hs.parse_scrape_reply(body, ASKED) == {}
    else:
        with pytest.raises(h.HttpReplyError, match="too large"):
            hs.parse_scrape_reply(body, ASKED)


@BOUNDED
@given(st.text(max_size=60))
def test_a_scrape_url_exists_exactly_when_the_last_path_part_begins_with_announce(path):
    url = "http://t.example:80/" + path.replace("?", "").replace("#", "")
    try:
        got = hs.scrape_url(url)
    except ValueError:
        return
    last = url.split("://", 1)[1].partition("/")[2].rpartition("/")[2]
    assert (got is not None) == last.startswith("announce")
    if got is not None:
        assert got.rpartition("/")[2] == "scrape" + last[len("announce"):]


# --- ITEMs as add reads them ---------------------------------------------------

hex_ish = st.text(st.sampled_from("0123456789abcdefABCDEF٠١g"), min_size=38, max_size=42)
item_text = st.one_of(
    hex_ish,
    st.text(max_size=60),
    st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567=1"), min_size=31, max_size=33),
    st.tuples(hex_ish, st.lists(st.text(max_size=30), max_size=3)).map(
        lambda t: "magnet:?xt=urn:btih:" + t[0] + "".join("&tr=" + x for x in t[1])),
    st.text(max_size=40).map(lambda t: "magnet:" + t),
    st.text(max_size=30).map(lambda t: t + ".torrent"),
    st.text(max_size=20).map(lambda t: "~" + t),
    st.integers(250, 5000).map(lambda n: "q" * n),
)


def _one_line_item_error(e: ItemError) -> None:
    assert str(e) and str(e).isprintable(), repr(str(e))


@BOUNDED
@given(item_text)
def test_item_texts_raise_only_one_line_item_errors(text):
    try:
        parsed = parse_items(text)
    except ItemError as e:
        _one_line_item_error(e)
    else:
        for item in parsed.items:
            assert len(item.info_hash) == 40 and all(t.isprintable() for t in item.trackers)


@BOUNDED
@given(_bencode_tokens().map(lambda b: b"d" + b) | nested | st.binary(max_size=200))
def test_torrent_bytes_raise_only_item_errors(data):
    try:
        (item,) = parse_torrent(data, "x.torrent").items
    except ItemError as e:
        _one_line_item_error(e)
    else:
        assert len(item.info_hash) == 40


line_bytes = st.one_of(
    item_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=60),
    st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff", b"# c", b"\r", b""]),
)
from_file = st.one_of(
    st.lists(line_bytes, max_size=8).map(lambda ls: b"\n".join(ls)),
    st.tuples(st.sampled_from(["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]), st.booleans(),
              st.lists(item_text, max_size=4)).map(
        lambda t: ({"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "utf-32-le": b"\xff\xfe\x00\x00",
                    "utf-32-be": b"\x00\x00\xfe\xff"}[t[0]] if t[1] else b"")
        + "\n".join(t[2]).encode(t[0], "surrogatepass")),
)


@SMALL
@given(from_file)
def test_from_files_raise_only_one_line_item_errors(data):
    f = io.BufferedReader(io.BytesIO(data))
    for where, text, base in item_sources((), f):
        assert where.startswith("stdin line ") or where == "stdin"
        try:
            if isinstance(text, ItemError):
                raise text
            parse_items(text, base)
        except ItemError as e:
            _one_line_item_error(e)


def test_a_torrent_file_past_the_size_cap_is_refused_unread(tmp_path):
    p = tmp_path / "huge.torrent"
    with p.open("wb") as f:  # sparse: past the cap without writing it
        f.truncate(MAX_TORRENT_FILE + 1)
    try:
        parse_items(str(p))
    except ItemError as e:
        assert "larger than 64 MiB" in str(e)
    else:
        raise AssertionError("a file past MAX_TORRENT_FILE was accepted")


u32 = st.integers(0, 2**32 - 1)


@BOUNDED
@given(st.binary(max_size=20 * 300 + 19))
def test_any_history_bytes_give_one_visit_per_whole_entry_of_a_time(raw):
    whole = raw[: len(raw) - len(raw) % HISTORY_ENTRY.size]
    times = [e[0] for e in HISTORY_ENTRY.iter_unpack(whole)]
    got = history(raw)
    assert len(got) == sum(1 for t in times if t) and [g["at"] for g in got] == sorted(float(t) for t in times if t)


@BOUNDED
@given(st.lists(st.tuples(u32, st.floats(0.0, 2.0**100, width=32), u32, u32, u32), max_size=300), st.randoms())
def test_a_packed_history_reads_back_in_time_order_whatever_its_ring_order(visits, rnd):
    # a ring holds its entries in any rotation (and a history of any age in any order): read back by time
    stored = list(visits)
    rnd.shuffle(stored)
    got = history(b"".join(HISTORY_ENTRY.pack(*v) for v in stored))
    want = sorted((v for v in stored if v[0]), key=lambda v: v[0])
    assert [(g["at"], g["peers"]) for g in got] == [(float(t), p) for t, _, p, _, _ in want]
    assert [g["seeders"] for g in got] == [None if s == NOT_REPORTED else s for _, _, _, s, _ in want]
    assert [g["score"] for g in got] == [pytest.approx(f, rel=1e-6) for _, f, _, _, _ in want]
