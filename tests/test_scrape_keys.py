"""HTTP scrape replies read key by key (crawler/sources/trackers/http_scrape.py), on hostile and odd bytes.

A ``files`` key is an asked hash's 20 bytes, or its UTF-8 text as WebTorrent's
``bittorrent-tracker`` writes it (``webtorrent_key``); every other key is
counted apart (``ScrapeFound.others``), so a caller never takes a reply it
cannot read for one that leaves a torrent out.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.errors import RemoteProtocolError
from crawler.sources.trackers import http_codec as h
from crawler.sources.trackers.http_scrape import MAX_COUNT, MAX_HASHES, ScrapeCounts, parse_scrape_reply, webtorrent_key

BOUNDED = hsettings(max_examples=300, deadline=timedelta(seconds=2))

hashes = st.binary(min_size=20, max_size=20)
# up to 80 asked: past what one request asks (MAX_HASHES), which the parser does not assume
asked_lists = st.lists(hashes | st.sampled_from([b"\x80" * 20, b"\x7f" * 20, bytes(range(0xEC, 0x100))]),
                       min_size=1, max_size=MAX_HASHES + 16, unique=True)
counts = st.tuples(*[st.integers(0, MAX_COUNT)] * 3)
# any key: empty, short, a hash's length, WebTorrent's lengths (21 to 40 bytes), past them
other_keys = st.binary(max_size=64)


def _entry(c: tuple[int, int, int]) -> dict:
    return {b"complete": c[0], b"incomplete": c[1], b"downloaded": c[2]}


@BOUNDED
@given(asked_lists, st.data())
def test_each_key_is_read_as_the_hash_it_names_and_every_other_one_counted(asked, data):
    files, expect, others = {}, {}, 0
    for ih in asked:
        form = data.draw(st.sampled_from(["raw", "webtorrent", "both", "none"]))
        raw, text = data.draw(counts), data.draw(counts)
        if form in ("raw", "both"):
            files[ih] = _entry(raw)
        if form in ("webtorrent", "both"):
            files[webtorrent_key(ih)] = _entry(text)
        if form != "none":  # the raw key's entry wins (a hash with no byte past 0x7f has one key)
            e = files[ih] if ih in files else files[webtorrent_key(ih)]
            expect[ih] = ScrapeCounts(e[b"complete"], e[b"incomplete"], e[b"downloaded"])
    forms = set(asked) | {webtorrent_key(ih) for ih in asked}
    for key in data.draw(st.lists(other_keys, max_size=8)):
        if key not in forms and key not in files:
            files[key] = _entry((7, 7, 7))
            others += 1
    found = parse_scrape_reply(bencode.encode({b"files": files, b"flags": {b"min_request_interval": 600}}), asked)
    assert found == expect
    assert (found.listed, found.others) == (len(files), others)


def test_a_webtorrent_key_is_its_hash_when_no_byte_passes_0x7f_and_longer_otherwise():
    assert webtorrent_key(bytes(range(20))) == bytes(range(20))
    assert webtorrent_key(b"\x80" + bytes(19)) == b"\xc2\x80" + bytes(19)
    assert len(webtorrent_key(b"\xff" * 20)) == 40


reply_value = st.recursive(
    st.integers(-(2**40), 2**40) | st.integers(MAX_COUNT - 2, MAX_COUNT + 2) | st.integers(10**60, 10**70)
    | st.binary(max_size=24),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from([b"complete", b"incomplete",
                                                                         b"downloaded", b"name"]), c, max_size=4),
    max_leaves=8)
ASKED = [b"\x00" * 20, b"\xc3" * 20, bytes(range(0x70, 0x84))]
file_keys = st.sampled_from(ASKED + [webtorrent_key(x) for x in ASKED]) | other_keys


@BOUNDED
@given(st.dictionaries(st.sampled_from([b"files", b"failure reason", b"flags"]),
                       st.dictionaries(file_keys, reply_value, max_size=6) | reply_value, max_size=3),
       st.lists(st.sampled_from(ASKED), min_size=1, max_size=3, unique=True))
def test_any_reply_is_read_or_refused_in_one_line(d, asked):
    try:
        found = parse_scrape_reply(bencode.encode(d), asked)
    except RemoteProtocolError as e:
        assert "\n" not in str(e) and (str(e).isprintable() or isinstance(e, h.TrackerRefused))
        return
    assert set(found) <= set(asked) and 0 <= found.others <= found.listed and (found.files or not found.listed)
    for c in found.values():
        assert all(isinstance(x, int) and 0 <= x <= MAX_COUNT for x in (c.seeders, c.leechers, c.completed))


@BOUNDED
@given(st.binary(max_size=600), st.lists(hashes, min_size=1, max_size=4, unique=True))
def test_arbitrary_bytes_are_read_or_refused_never_a_traceback(body, asked):
    try:
        found = parse_scrape_reply(body, asked)
    except RemoteProtocolError as e:
        assert "\n" not in str(e)
        return
    assert set(found) <= set(asked) and 0 <= found.others <= found.listed


def test_a_count_past_the_cap_under_webtorrents_key_is_refused_naming_the_hash():
    ih = b"\xfe" * 20
    body = bencode.encode({b"files": {webtorrent_key(ih): _entry((MAX_COUNT + 1, 0, 0))}})
    with pytest.raises(h.HttpReplyError, match=f"scrape entry of {ih.hex()} lacks whole counts"):
        parse_scrape_reply(body, [ih])


@pytest.mark.parametrize("keys", [MAX_HASHES, h.REPLY_MAX_VALUES // 2 + 1])
def test_webtorrent_keys_past_the_value_budget_are_refused_and_a_full_request_of_them_read(keys):
    asked = [b"\x80" * 17 + i.to_bytes(3, "big") for i in range(keys)]
    body = b"d5:filesd" + b"".join(b"%d:%sde" % (len(webtorrent_key(x)), webtorrent_key(x)) for x in asked) + b"ee"
    if keys * 2 <= h.REPLY_MAX_VALUES:  # a key and an empty dictionary each: two values
        with pytest.raises(h.HttpReplyError, match="lacks whole counts"):
            parse_scrape_reply(body, asked)
        full = bencode.encode({b"files": {webtorrent_key(x): _entry((1, 0, 0)) for x in asked}})
        found = parse_scrape_reply(full, asked)
        assert len(found) == keys and (found.listed, found.others) == (keys, 0)
    else:
        with pytest.raises(h.HttpReplyError, match="too large"):
            parse_scrape_reply(body, asked[:MAX_HASHES])


def test_a_reply_without_files_says_so_and_one_with_an_empty_files_lists_nothing():
    assert parse_scrape_reply(b"d8:intervali1800e5:peers0:e", [b"\x01" * 20]).files is False
    found = parse_scrape_reply(b"d5:filesdee", [b"\x01" * 20])
    assert found == {} and (found.files, found.listed, found.others) == (True, 0, 0)
