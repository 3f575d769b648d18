"""bencode: strict decoding of untrusted bytes, round-trips, typed errors only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.bencode import codec as bencode
from crawler.bencode.codec import BencodeError, decode, decode_prefix, encode
from crawler.errors import RemoteProtocolError

values = st.recursive(
    st.integers(min_value=-(2**70), max_value=2**70) | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.binary(max_size=10), children, max_size=5),
    max_leaves=30,
)


@given(values)
def test_round_trip(v):
    assert decode(encode(v)) == v


@given(values)
def test_encoding_is_canonical(v):
    data = encode(v)
    assert encode(decode(data)) == data


@hsettings(max_examples=500)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_bencode_error(data):
    try:
        decode(data)
    except BencodeError as e:
        assert isinstance(e, RemoteProtocolError)
        assert str(e)


@given(values, st.integers(min_value=1, max_value=1000))
def test_truncation_always_detected(v, cut):
    data = encode(v)
    if cut >= len(data):
        cut = len(data) - 1
    if cut <= 0:
        return
    with pytest.raises(BencodeError):
        decode(data[:cut])


@given(values, st.binary(min_size=1, max_size=5))
def test_trailing_bytes_refused(v, tail):
    with pytest.raises(BencodeError, match="trailing"):
        decode(encode(v) + tail)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "empty"),
        (b"i01e", "leading zero"),
        (b"i-0e", "-0"),
        (b"ie", "not a decimal"),
        (b"i12", "no 'e'"),
        (b"03:abc", "leading zero"),
        (b"5:abc", "wants 5 bytes"),
        (b"l", "not closed"),
        (b"d1:ai1e", "not closed"),
        (b"di1ei2ee", "not a byte string"),
        (b"d1:ai1e1:ai2ee", "duplicate"),
        (b"x", "unexpected byte"),
        (b"-1:a", "unexpected byte"),
        (b"l" * 100 + b"e" * 100, "nesting"),
        (b"i1ei2e", "trailing"),
    ],
)
def test_malformations_named(data, why):
    with pytest.raises(BencodeError, match=why):
        decode(data)


def test_unsorted_keys_accepted():
    assert decode(b"d1:bi2e1:ai1ee") == {b"a": 1, b"b": 2}


def test_encode_sorts_keys_and_takes_str():
    assert encode({"b": 1, b"a": "x"}) == b"d1:a1:x1:bi1ee"


@pytest.mark.parametrize("bad", [True, 1.5, None, {1: 2}, object()])
def test_encode_refuses_other_types(bad):
    with pytest.raises(TypeError):
        encode(bad)


def test_decode_prefix_gives_span():
    data = b"d4:infod4:name1:xe3:zzzi1ee"
    start = data.index(b"d4:name")
    value, end = decode_prefix(data, start)
    assert value == {b"name": b"x"}
    assert data[start:end] == b"d4:name1:xe"


def _lists(n: int) -> bytes:
    """``n`` lists, each the only item of the one around it."""
    return b"l" * n + b"e" * n


def test_depth_limit_is_module_constant():
    deepest: list = []
    for _ in range(bencode.MAX_DEPTH):
        deepest = [deepest]
    # MAX_DEPTH lists nested in the outermost one decode, whole ...
    assert decode(_lists(bencode.MAX_DEPTH + 1)) == deepest
    assert decode(_lists(bencode.MAX_DEPTH)) == deepest[0]
    # ... one more is refused where it opens
    with pytest.raises(BencodeError, match=f"^nesting deeper than {bencode.MAX_DEPTH} at offset "
                                           f"{bencode.MAX_DEPTH + 1}$"):
        decode(_lists(bencode.MAX_DEPTH + 2))


@pytest.mark.parametrize("data", [
    b"i" + b"1" * 5000 + b"e",           # Python's int() refuses > 4,300 digits with a bare ValueError
    b"i-" + b"9" * 4301 + b"e",
    b"1" * 5000 + b":",                  # a string length likewise
    b"l" + b"i" + b"7" * (bencode.MAX_INT_DIGITS + 1) + b"ee",
    b"d1:a" + b"5" * 10_000 + b":xe",
])
def test_overlong_numbers_are_bencode_errors(data):
    with pytest.raises(BencodeError, match="digits, more than"):
        decode(data)


def test_the_longest_integer_allowed_still_decodes():
    n = int("9" * bencode.MAX_INT_DIGITS)
    assert decode(encode(n)) == n and decode(encode(-n)) == -n


@pytest.mark.parametrize("data", [b"i\xd9\xa1e", "i²e".encode(), b"i\xb2e", b"i 1e", b"i+1e", b"i1_0e",
                                  "١:a".encode(), b"\xb2:a"])
def test_only_ascii_digits_are_digits(data):
    with pytest.raises(BencodeError):
        decode(data)


# --- schemas: what a decode keeps ------------------------------------------------------------


def test_keys_keeps_only_the_named_keys_and_checks_the_others():
    data = encode({b"a": 1, b"b": [1, {b"x": b"y"}], b"c": b"z"})
    assert decode(data, bencode.Keys({b"a": bencode.KEEP, b"c": bencode.SKIP})) == {b"a": 1, b"c": bencode.STRING}
    # an unread value is still checked
    with pytest.raises(BencodeError, match="leading zero"):
        decode(b"d1:ai1e1:bli01eee", bencode.Keys({b"a": bencode.KEEP}))


def test_a_key_kept_twice_is_refused_an_unread_one_is_not_looked_up():
    with pytest.raises(BencodeError, match="duplicate dictionary key b'a'"):
        decode(b"d1:ai1e1:ai2ee", bencode.Keys({b"a": bencode.KEEP}))
    assert decode(b"d1:ai1e1:bi2e1:bi3ee", bencode.Keys({b"a": bencode.KEEP})) == {b"a": 1}


def test_items_keeps_the_first_and_counts_the_rest():
    got = decode(encode([[1], [2], [3], [4]]), bencode.Items(bencode.KEEP, 2))
    assert got == [[1], [2]] and got.cut == 2
    assert decode(encode(b"compact"), bencode.Items(bencode.KEEP, 2)) == b"compact"  # a string: kept
    assert decode(encode({b"a": 1}), bencode.Items(bencode.KEEP, 2)) is bencode.DICTIONARY


def test_leaf_keeps_strings_and_integers_not_containers():
    schema = bencode.Keys({b"a": bencode.LEAF, b"b": bencode.LEAF, b"c": bencode.LEAF})
    assert decode(encode({b"a": 7, b"b": b"x", b"c": [1, 2]}), schema) == {b"a": 7, b"b": b"x", b"c": bencode.LIST}


def test_each_hands_on_the_leaves_of_a_list_of_lists():
    seen = []
    data = encode([[b"u1", 2, [b"deep"]], b"flat", [b"u2"], {b"d": b"x"}])
    assert decode(data, bencode.Each(bencode.Each(seen.append))) is None
    assert seen == [b"u1", 2, b"u2"]


def test_spans_are_the_values_bytes_as_they_stand():
    data = b"d4:infod4:name1:xe3:zzzi1ee"
    got = decode(data, bencode.Keys({b"info": bencode.SKIP}, spans=frozenset({b"info"})))
    start, end = got.spans[b"info"]
    assert data[start:end] == b"d4:name1:xe" and got[b"info"] is bencode.DICTIONARY


def test_the_budget_is_one_line_naming_where_it_ran_out():
    with pytest.raises(bencode.TooManyValues) as e:
        decode(b"l" + b"le" * 10 + b"e", bencode.SKIP, max_values=5)
    assert isinstance(e.value, RemoteProtocolError) and e.value.limit == 5 and e.value.offset == 9
    assert str(e.value) == "more than 5 values (the budget ran out at offset 9)"
    assert decode(b"l" + b"le" * 4 + b"e", bencode.SKIP, max_values=5) is bencode.LIST
