"""The info dictionary a peer sent, read by ``metadata_info.read_info``: checked against its info-hash,
summed up right, and hostile bytes (past every cap) end as ``InfoError`` and nothing else.

Inputs that hash right are made by hashing them: whoever writes an info
dictionary can make a torrent of it, so every byte after the SHA-1 check is
the adversary's.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.sources.metadata import metadata_info
from crawler.sources.metadata.metadata_info import (
    MAX_FILES,
    MAX_METADATA_BYTES,
    MAX_VALUES,
    SLICE_BYTES,
    SLICE_VALUES,
    InfoError,
    InfoMismatch,
    TorrentInfo,
    read_info,
)
from crawler.torrents.torrent_names import of_torrent

BOUNDED = hsettings(max_examples=300, deadline=timedelta(seconds=2))


def read(info: bytes) -> TorrentInfo:
    """``read_info`` of bytes under their own SHA-1."""
    return read_info(hashlib.sha1(info).digest(), info)


names = st.one_of(st.none(), st.text(max_size=40), st.binary(max_size=40), st.integers())
lengths = st.integers(0, 2**63)
files = st.lists(st.tuples(lengths, st.sampled_from([None, b"", b"p", b"x", b"xp", b"h"])), max_size=20)


def info_dict(name, name_utf8, single: int | None, entries) -> dict:
    d = {"piece length": 16384, "pieces": b"\x00" * 20}
    if name is not None:
        d["name"] = name
    if name_utf8 is not None:
        d["name.utf-8"] = name_utf8
    if single is not None:
        d["length"] = single
    else:
        d["files"] = [{"length": n, "path": [b"f"], **({} if a is None else {"attr": a})} for n, a in entries]
    return d


@BOUNDED
@given(names, names, st.one_of(st.none(), lengths), files)
def test_a_real_info_dictionary_is_summed_up_padding_left_out(name, name_utf8, single, entries):
    info = bencode.encode(info_dict(name, name_utf8, single, entries))
    got = read(info)
    shown = of_torrent(name.encode() if isinstance(name, str) else name,
                       name_utf8.encode() if isinstance(name_utf8, str) else name_utf8)
    if single is not None:
        assert got == TorrentInfo(shown, single, 1)
    else:
        kept = [n for n, a in entries if a is None or b"p" not in a]
        assert got == TorrentInfo(shown, sum(kept), len(kept))


@BOUNDED
@given(st.binary(max_size=300), st.binary(min_size=20, max_size=20))
def test_bytes_under_another_info_hash_are_refused_before_they_are_read(info, other):
    if hashlib.sha1(info).digest() == other:
        return
    with pytest.raises(InfoMismatch):
        read_info(other, info)


def _hostile():
    token = st.one_of(
        st.sampled_from([b"d", b"l", b"e", b"i-1e", b"i0e", b"i01e", b"0:", b"4:name", b"6:length", b"5:files",
                         b"4:attr", b"1:p", b"10:name.utf-8", b"i99999999999999999999999999e", b"le", b"de",
                         b"l" * 70, b"\xff", b"3:\xff\xfe\xfd"]),
        st.binary(max_size=6),
    )
    return st.lists(token, max_size=60).map(b"".join)


@BOUNDED
@given(st.one_of(_hostile(), st.binary(max_size=200)))
def test_hostile_bytes_that_hash_right_end_as_info_error_or_a_summary(info):
    try:
        got = read(info)
    except InfoError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert got.file_count >= 0 and (got.total_size is None or got.total_size >= 0)


@BOUNDED
@given(st.data())
def test_a_real_info_dictionary_cut_or_changed_anywhere_is_refused_or_read(data):
    info = bencode.encode(info_dict("name", None, None, [(5, None), (7, b"p"), (9, None)]))
    at = data.draw(st.integers(0, len(info) - 1))
    mutated = data.draw(st.sampled_from([
        info[:at], info[:at] + info[at + 1:], info[:at] + bytes([info[at] ^ 0xFF]) + info[at + 1:],
        info[:at] + b"e" + info[at:], info[:at] + b"l" + info[at:],
    ]))
    try:
        got = read(mutated)
    except InfoError:
        return
    assert got.file_count >= 0


@pytest.mark.parametrize("info, why", [
    (bencode.encode({"name": "a", "length": -1}), "length is not a whole number of 0 or more"),
    (bencode.encode({"name": "a", "length": b"12"}), "length is not a whole number of 0 or more"),
    (bencode.encode({"name": "a", "files": [{"length": -5, "path": ["x"]}]}), "file 0's length"),
    (bencode.encode({"name": "a", "files": [{"path": ["x"]}]}), "file 0's length"),
    (bencode.encode({"name": "a", "files": [["x"]]}), "file 0 of the info dictionary is not a dictionary"),
    (bencode.encode({"name": "a", "files": 3}), "files is not a list"),
    (bencode.encode({"name": "a", "file tree": {}}), "neither length nor files"),
    (bencode.encode([1, 2]), "not a dictionary"),
    (b"d4:name1:ae", "neither length nor files"),
    (b"d4:name1:a6:lengthi1ee" + b"x", "not valid bencode"),
])
def test_malformed_info_dictionaries_say_why(info, why):
    with pytest.raises(InfoError, match=why):
        read(info)


def test_name_utf8_wins_when_it_is_utf8():
    info = bencode.encode({"name": b"caf\xe9", "name.utf-8": "café", "length": 1})
    assert read(info).name == "café"
    info = bencode.encode({"name": b"cafe", "name.utf-8": b"caf\xff", "length": 1})
    assert read(info).name == "cafe"


def test_past_every_cap():
    # Longer than libtorrent is told to take: refused before it is hashed or read.
    with pytest.raises(InfoError, match="more than 4,194,304"):
        read(b"d4:name" + b"1" * MAX_METADATA_BYTES + b"e")
    # More files than are kept: all counted, their size unknown.
    entries = b"".join(b"d6:lengthi2e4:pathl1:xee" for _ in range(MAX_FILES + 3))
    got = read(b"d5:filesl" + entries + b"e4:name1:ae")
    assert got == TorrentInfo("a", None, MAX_FILES + 3)
    # More values than the budget: refused, however few bytes each takes.
    many = b"d4:name1:a6:lengthi1e1:zl" + b"0:" * MAX_VALUES + b"ee"
    assert len(many) < MAX_METADATA_BYTES
    with pytest.raises(InfoError, match="values"):
        read(many)


def test_a_malformed_info_hash_is_our_fault():
    with pytest.raises(ValueError):
        read_info(b"\x00" * 19, b"de")


# --- read in slices: the same outcome as one bencode.decode, and pauses between slices -----------------


def reference(info: bytes, max_files: int, max_values: int) -> TorrentInfo:
    """What ``read_info`` gives for ``info`` under its own SHA-1, read by one ``bencode.decode`` with a
    schema keeping the same keys (raises ``InfoError`` with the message ``read_info`` must give)."""
    entry = bencode.Keys({b"length": bencode.LEAF, b"attr": bencode.LEAF})
    schema = bencode.Keys({b"name": bencode.LEAF, b"name.utf-8": bencode.LEAF, b"length": bencode.LEAF,
                           b"files": bencode.Items(entry, limit=max_files)})
    try:
        d = bencode.decode(info, schema, max_values=max_values)
    except bencode.BencodeError as e:
        raise InfoError(f"info dictionary is not valid bencode: {e}") from None
    if not isinstance(d, dict):
        raise InfoError("info dictionary is not a dictionary")
    name = of_torrent(d.get(b"name"), d.get(b"name.utf-8"))
    if b"files" in d:
        files = d[b"files"]
        if not isinstance(files, bencode.Cut):
            raise InfoError("info dictionary's files is not a list")
        size = count = 0
        for i, e in enumerate(files):
            if not isinstance(e, dict):
                raise InfoError(f"file {i} of the info dictionary is not a dictionary")
            n = e.get(b"length")
            if type(n) is not int or n < 0:
                raise InfoError(f"file {i}'s length is not a whole number of 0 or more")
            if not (isinstance(e.get(b"attr"), bytes) and b"p" in e[b"attr"]):
                size, count = size + n, count + 1
        return TorrentInfo(name, None if files.cut else size, count + files.cut)
    if b"length" in d:
        n = d[b"length"]
        if type(n) is not int or n < 0:
            raise InfoError("length is not a whole number of 0 or more")
        return TorrentInfo(name, n, 1)
    raise InfoError("info dictionary has neither length nor files (a v2-only torrent?)")


def outcome(read, info: bytes) -> object:
    try:
        return read(info)
    except InfoError as e:
        return type(e), str(e)


_keys = st.sampled_from([b"name", b"name.utf-8", b"length", b"files", b"attr", b"path", b"pieces", b"x"])
_leaves = st.one_of(st.integers(-3, 2**64), st.binary(max_size=6), st.sampled_from([b"p", b"xp", b"\xff"]))
_values = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(_keys, inner, max_size=5)), max_leaves=20)
_entry = st.fixed_dictionaries(
    {b"length": st.one_of(st.integers(0, 2**40), st.integers(0, 2**40), _values)},
    optional={b"attr": st.one_of(st.sampled_from([b"p", b"xp", b"x", b""]), _values),
              b"path": st.lists(st.binary(max_size=3), max_size=3), b"x": _values})
_files = st.lists(st.one_of(_entry, _entry, _entry, _values), max_size=7)
_others = {b"name": _values, b"name.utf-8": _values, b"length": st.one_of(st.integers(0, 99), _values),
           b"pieces": st.binary(max_size=40), b"x": _values}
_info = st.one_of(st.fixed_dictionaries({b"files": _files}, optional=_others),
                  st.fixed_dictionaries({}, optional={**_others, b"files": st.one_of(_files, _values)}))


def _shaped():
    """Bencoded values shaped like info dictionaries, as they are or cut, changed or run on."""
    change = st.sampled_from(["", "", "", "cut", "flip", "more", "e", "twice"])
    return st.tuples(_info.map(bencode.encode), st.integers(0, 400), change).map(
        lambda t: {"": t[0], "cut": t[0][: t[1]], "flip": t[0][: t[1]] + b"e" + t[0][t[1] + 1 :],
                   "more": t[0] + b"i1e", "e": t[0][: t[1]] + b"e" + t[0][t[1]:],
                   "twice": t[0][:-1] + t[0][1:]}[t[2]])


@hsettings(max_examples=1000, deadline=timedelta(seconds=2))
@given(st.one_of(_shaped(), _shaped(), _hostile(), st.binary(max_size=100)), st.integers(0, 4),
       st.one_of(st.integers(1, 300), st.just(MAX_VALUES), st.just(MAX_VALUES)), st.integers(1, 7))
@example(b"l" * 70, 1, MAX_VALUES, 5)  # too deep, wherever the nesting is
@example(b"d4:name" + b"l" * 70, 1, MAX_VALUES, 5)
@example(b"d5:filesld1:x" + b"d1:x" * 70, 1, MAX_VALUES, 5)
@example(b"d5:filesld1:x" + b"l" * 62 + b"e" * 62 + b"6:lengthi0eee4:name1:ae", 1, MAX_VALUES, 5)
@example(b"d4:namedi1e1:aee", 0, 3, 1)  # the budget runs out at a key that is no string
def test_read_in_slices_is_one_decode(info, max_files, max_values, slice_values):
    # Small caps and slices, so that inputs of a few bytes meet them: the files past MAX_FILES, the budget
    # running out anywhere, a pause after any step.
    with pytest.MonkeyPatch.context() as m:
        m.setattr(metadata_info, "MAX_FILES", max_files)
        m.setattr(metadata_info, "MAX_VALUES", max_values)
        m.setattr(metadata_info, "SLICE_VALUES", slice_values)
        got = outcome(lambda b: read_info(hashlib.sha1(b).digest(), b, lambda: None), info)
    assert got == outcome(lambda b: reference(b, max_files, max_values), info)


def test_the_worst_input_is_read_in_slices_each_of_a_bounded_number_of_values():
    entries = b"".join(b"d6:lengthi2e4:pathl1:xee" for _ in range(MAX_FILES + 3))
    info = b"d5:filesl" + entries + b"e4:name1:ae"
    pauses = []
    got = read_info(hashlib.sha1(info).digest(), info, lambda: pauses.append(1))
    assert got == TorrentInfo("a", None, MAX_FILES + 3)
    # Eight steps an entry (its dictionary, two keys, an integer, the path list and its string, two "e"),
    # a pause every SLICE_VALUES steps, and one every SLICE_BYTES bytes hashed.
    assert len(pauses) >= (MAX_FILES + 3) * 8 // SLICE_VALUES + len(info) // SLICE_BYTES
