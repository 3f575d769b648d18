"""ITEM parsing: hashes, magnets, .torrent files; untrusted input raises only ItemError."""

import base64
import hashlib
import re
import time

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.errors import ItemError
from crawler.torrents.items import parse_item, parse_items, parse_magnet, parse_torrent

HEX = "0123456789abcdef0123456789abcdef01234567"
B32 = base64.b32encode(bytes.fromhex(HEX)).decode()


def make_torrent(info=None, announce=None, announce_list=None):
    info = info or {b"name": b"x", b"piece length": 16384, b"pieces": b"\0" * 20, b"length": 1}
    d = {b"info": info}
    if announce:
        d[b"announce"] = announce
    if announce_list:
        d[b"announce-list"] = announce_list
    return bencode.encode(d), hashlib.sha1(bencode.encode(info)).hexdigest()


def test_hex_and_base32():
    assert parse_item(HEX).info_hash == HEX
    assert parse_item(HEX.upper()).info_hash == HEX
    assert parse_item(B32).info_hash == HEX
    assert parse_item(B32.lower()).info_hash == HEX


def test_magnet_with_trackers():
    m = f"magnet:?xt=urn:btih:{B32}&dn=x&tr=udp%3A%2F%2Ft1.example%3A80%2Fannounce&tr=http://t2.example/announce"
    (item,) = parse_magnet(m).items
    assert item.info_hash == HEX
    assert item.trackers == ("udp://t1.example:80/announce", "http://t2.example/announce")


@pytest.mark.parametrize("bad, reason", [
    ("magnet:?dn=nothing", "no xt=urn:btih"),
    ("magnet:?xt=urn:btmh:1220" + "a" * 64, "v2"),
    ("magnet:?xt=urn:btih:1234", "info-hash"),
    (f"magnet:?xt=urn:btih:{HEX}&tr=ftp://x/announce", "tracker"),
])
def test_bad_magnets(bad, reason):
    with pytest.raises(ItemError, match=reason):
        parse_item(bad)


def test_torrent_file_announce_and_list(tmp_path):
    data, digest = make_torrent(
        announce=b"udp://a.example:1/announce",
        announce_list=[[b"udp://a.example:1/announce", b"http://b.example/announce"], [b"wss://c/x"]],
    )
    p = tmp_path / "x.torrent"
    p.write_bytes(data)
    item = parse_item(str(p))
    assert item.info_hash == digest
    assert item.trackers == ("udp://a.example:1/announce", "http://b.example/announce")


def test_torrent_hash_uses_the_info_bytes_as_they_stand():
    # keys out of order: re-encoding would sort them and change the hash
    raw_info = b"d6:lengthi1e4:name1:x12:piece lengthi16384e6:pieces20:" + b"\0" * 20 + b"e"
    unsorted = b"d4:name1:x6:lengthi1e12:piece lengthi16384e6:pieces20:" + b"\0" * 20 + b"e"
    data = b"d4:info" + unsorted + b"e"
    assert parse_torrent(data).items[0].info_hash == hashlib.sha1(unsorted).hexdigest()
    assert hashlib.sha1(unsorted).hexdigest() != hashlib.sha1(raw_info).hexdigest()


@pytest.mark.parametrize("content, reason", [
    (b"not bencode", "not a bencoded dictionary"),
    (b"d4:infoi1ee", "no info dictionary"),
    (b"d3:fooi1ee", "no info dictionary"),
    (b"d4:info", "not valid bencode"),
])
def test_bad_torrent_files(tmp_path, content, reason):
    p = tmp_path / "bad.torrent"
    p.write_bytes(content)
    with pytest.raises(ItemError, match=reason):
        parse_item(str(p))


def test_missing_file_and_garbage():
    with pytest.raises(ItemError, match="no such file"):
        parse_item("/nonexistent/x.torrent")
    with pytest.raises(ItemError, match="40 characters"):
        parse_item("abc123")
    with pytest.raises(ItemError, match="not an info-hash"):
        parse_item("hello world")


@given(st.binary(max_size=300))
@hsettings(max_examples=300)
def test_torrent_parser_raises_only_item_error(data):
    try:
        (item,) = parse_torrent(data).items
    except ItemError:
        return
    assert len(item.info_hash) == 40


@given(st.text(max_size=200))
@hsettings(max_examples=300)
def test_item_parser_raises_only_item_error(text):
    try:
        parsed = parse_items("magnet:?" + text)
    except ItemError:
        return
    assert parsed.items and all(len(item.info_hash) == 40 for item in parsed.items)


@given(st.binary(min_size=20, max_size=20), st.lists(st.sampled_from(
    ["udp://a.example:1/announce", "http://b.example/announce", "https://c.example:443/a"]), max_size=3))
def test_magnet_round_trip(raw, trackers):
    from urllib.parse import quote

    m = "magnet:?xt=urn:btih:" + base64.b32encode(raw).decode() + "".join("&tr=" + quote(t, safe="") for t in trackers)
    (item,) = parse_magnet(m).items
    assert item.info_hash == raw.hex()
    assert item.trackers == tuple(dict.fromkeys(trackers))


def _one_line(e: ItemError) -> str:
    text = str(e)
    assert text and text.isprintable(), repr(text)  # no newline, NUL, escape or surrogate reaches a terminal
    return text


def test_a_nul_byte_in_a_torrent_path_is_an_item_error():
    with pytest.raises(ItemError, match="holds a NUL byte") as e:
        parse_item("some\x00where.torrent")
    assert "some\\x00where.torrent" in _one_line(e.value)


@pytest.mark.parametrize("text, why", [
    ("~no-such-user-xyz/a.torrent", "cannot find the home directory"),
    ("x" * 5000, "not an info-hash"),                      # too long for a file name: not a file
    ("y" * 5000 + ".torrent", "cannot read"),
    ("/dev/zero", "not a regular file"),                     # would read forever
    ("caf\udce9.torrent", "no such file"),                   # non-UTF-8 bytes of a name, as POSIX argv gives them
    ("caf\udce9", "(and not UTF-8 text)"),
    ("\x1b[2Jhello\x85there\u2028", "not an info-hash"),
    ("magnet://[oops?xt=urn:btih:" + HEX, "bad magnet query"),
])
def test_hostile_item_texts_are_one_line_item_errors(text, why):
    with pytest.raises(ItemError, match=re.escape(why)) as e:
        parse_item(text)
    _one_line(e.value)


def test_a_directory_named_like_a_torrent(tmp_path):
    (tmp_path / "d.torrent").mkdir()
    with pytest.raises(ItemError, match="is a directory"):
        parse_item(str(tmp_path / "d.torrent"))


def test_a_torrent_with_a_huge_integer_is_an_item_error(tmp_path):
    data, _ = make_torrent()
    p = tmp_path / "big.torrent"
    p.write_bytes(data[:-1] + b"3:bigi" + b"9" * 5000 + b"ee")
    with pytest.raises(ItemError, match="not valid bencode: integer at offset .* has 5000 digits"):
        parse_item(str(p))


@pytest.mark.parametrize("tr", ["udp%3A%2F%2Fh%00x%3A1%2Fa", "udp://h\udcff:1/a", "http%3A%2F%2Fh%2Fa%0Ab",
                                "udp://h:%EF%BC%91%EF%BC%92/a", "udp://h:99999/a", "udp://h\u2028:1/a"])
def test_magnet_trackers_no_client_could_use_are_refused(tr):
    with pytest.raises(ItemError, match="magnet tr=") as e:
        parse_item(f"magnet:?xt=urn:btih:{HEX}&tr={tr}")
    _one_line(e.value)


def test_torrent_trackers_no_client_could_use_are_dropped():
    data, digest = make_torrent(announce=b"udp://h\x00x:1/a",
                                announce_list=[[b"udp://ok.example:1/a", b"udp://h:\xef\xbc\x91/a", b"\xff\xfe"]])
    (item,) = parse_torrent(data).items
    assert item.info_hash == digest and item.trackers == ("udp://ok.example:1/a",)


# --- several topics in one magnet ------------------------------------------------------------

H2 = "fedcba9876543210fedcba9876543210fedcba98"
H3 = "00112233445566778899aabbccddeeff00112233"


def test_a_magnet_names_a_torrent_for_each_distinct_v1_topic_each_with_its_trackers():
    # A hybrid torrent's v2 topic (urn:btmh) beside them names no torrent of its own: passed over.
    m = (f"magnet:?xt=urn:btih:{HEX}&dn=two&xt=URN:BTIH:{H2}&tr=udp%3A%2F%2Fa.example%3A1%2Fannounce"
         f"&xt=urn:btmh:1220{'ab' * 32}&xt.1=urn:btih:{B32}&xt.2=urn:btih:{H3}&tr=http://b.example/announce")
    parsed = parse_items(m)
    assert [i.info_hash for i in parsed.items] == [HEX, H2, H3]  # B32 is HEX again: once
    assert {i.trackers for i in parsed.items} == {("udp://a.example:1/announce", "http://b.example/announce")}
    assert parsed.trackers_dropped == 0


def test_a_magnet_with_a_bad_second_topic_is_refused_whole():
    with pytest.raises(ItemError, match="not a 40-hex or 32-char base32 info-hash: 12345"):
        parse_items(f"magnet:?xt=urn:btih:{HEX}&xt=urn:btih:12345")


def test_parse_item_refuses_an_item_of_several_torrents():
    with pytest.raises(ItemError, match="names 2 torrents, not one"):
        parse_item(f"magnet:?xt=urn:btih:{HEX}&xt=urn:btih:{H2}")


# --- trackers read in linear time, the cap applied while reading -------------------------------


def _tr(i: int) -> str:
    return f"udp://t{i}.example:{1 + i % 60000}/announce"


def test_32000_magnet_trackers_are_read_in_linear_time_keeping_the_first_cap_in_order():
    from urllib.parse import quote

    urls = [_tr(i) for i in range(32_000)]
    # Duplicates within the cap and of kept ones past it count once; the order is the first one's.
    listed = urls[:32] + urls[:32] + urls[32:] + urls[:64]
    m = f"magnet:?xt=urn:btih:{HEX}" + "".join("&tr=" + quote(u, safe="") for u in listed)
    start = time.thread_time()
    parsed = parse_magnet(m, 64)
    cpu = time.thread_time() - start
    assert parsed.items[0].trackers == tuple(urls[:64])
    assert parsed.trackers_dropped == 32_000 - 64
    assert cpu < 0.5, cpu  # ~0.02 s; de-duplicating by list search took 14 s


def test_a_4_mib_magnet_line_is_read_in_well_under_a_second():
    parts = [f"magnet:?xt=urn:btih:{HEX}"]
    size = len(parts[0])
    while size < 4 * 1024 * 1024 - 40:
        parts.append(f"&tr=udp://t{len(parts) - 1}.x:1/a")
        size += len(parts[-1])
    line, n = "".join(parts), len(parts) - 1
    start = time.thread_time()
    parsed = parse_items(line, None, 100)
    cpu = time.thread_time() - start
    assert parsed.items[0].trackers == tuple(f"udp://t{i}.x:1/a" for i in range(100))
    assert parsed.trackers_dropped == n - 100 and n > 180_000
    assert cpu < 0.5, cpu  # ~0.1 s


def test_a_bad_tracker_past_the_cap_is_not_read():
    m = f"magnet:?xt=urn:btih:{HEX}&tr={_tr(1)}&tr={_tr(2)}&tr=ftp://x/announce"
    with pytest.raises(ItemError, match="magnet tr="):
        parse_magnet(m, 3)
    parsed = parse_magnet(m, 2)  # the third is past the cap: counted, not validated
    assert parsed.items[0].trackers == (_tr(1), _tr(2)) and parsed.trackers_dropped == 1


def test_a_torrents_trackers_are_read_up_to_the_cap_announce_first():
    tiers = [[_tr(i).encode()] for i in range(1, 20_001)] + [[b"wss://x/y", _tr(5).encode()]]
    info = {b"name": b"x", b"piece length": 16384, b"pieces": b"\0" * 20, b"length": 1}
    # announce after announce-list in the file (keys unsorted): still first.
    data = (b"d13:announce-list" + bencode.encode(tiers) + b"4:info" + bencode.encode(info)
            + b"8:announce" + bencode.encode(_tr(0)) + b"e")
    start = time.thread_time()
    parsed = parse_torrent(data, "x.torrent", 64)
    cpu = time.thread_time() - start
    (item,) = parsed.items
    assert item.info_hash == hashlib.sha1(bencode.encode(info)).hexdigest()
    assert item.trackers == tuple(_tr(i) for i in range(64))
    # 20,000 distinct listed and the announce, 64 kept; past the cap the wss:// entry is counted too
    # (entries there are not validated), the second t5 not (a kept one's text).
    assert parsed.trackers_dropped == (20_000 + 1 - 64) + 1
    assert cpu < 0.5, cpu


# --- v2 and hybrid .torrent files -----------------------------------------------------------------


def test_a_v2_only_torrent_is_refused_and_a_hybrid_is_crawled_by_its_v1_hash():
    tree = {b"a.bin": {b"": {b"length": 5, b"pieces root": b"\1" * 32}}}
    v2 = {b"name": b"x", b"piece length": 16384, b"meta version": 2, b"file tree": tree}
    data = bencode.encode({b"info": v2, b"piece layers": {}})
    with pytest.raises(ItemError, match=r"^v2\.torrent is a v2-only torrent \(BEP 52, no v1 pieces\)"):
        parse_torrent(data, "v2.torrent")
    hybrid = {**v2, b"pieces": b"\2" * 20, b"length": 5}
    (item,) = parse_torrent(bencode.encode({b"info": hybrid, b"piece layers": {}}), "h.torrent").items
    assert item.info_hash == hashlib.sha1(bencode.encode(hybrid)).hexdigest()
