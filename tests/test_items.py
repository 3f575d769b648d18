"""ITEM parsing: hashes, magnets, .torrent files; untrusted input raises only ItemError."""

import base64
import hashlib
import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler import bencode
from crawler.errors import ItemError
from crawler.items import parse_item, parse_magnet, parse_torrent

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
    item = parse_magnet(m)
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
    assert parse_torrent(data).info_hash == hashlib.sha1(unsorted).hexdigest()
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
        item = parse_torrent(data)
    except ItemError:
        return
    assert len(item.info_hash) == 40


@given(st.text(max_size=200))
@hsettings(max_examples=300)
def test_item_parser_raises_only_item_error(text):
    try:
        item = parse_item("magnet:?" + text)
    except ItemError:
        return
    assert len(item.info_hash) == 40


@given(st.binary(min_size=20, max_size=20), st.lists(st.sampled_from(
    ["udp://a.example:1/announce", "http://b.example/announce", "https://c.example:443/a"]), max_size=3))
def test_magnet_round_trip(raw, trackers):
    from urllib.parse import quote

    m = "magnet:?xt=urn:btih:" + base64.b32encode(raw).decode() + "".join("&tr=" + quote(t, safe="") for t in trackers)
    item = parse_magnet(m)
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
    item = parse_torrent(data)
    assert item.info_hash == digest and item.trackers == ("udp://ok.example:1/a",)
