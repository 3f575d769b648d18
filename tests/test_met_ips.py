"""The IPs a process has met (crawler/counters/met_ips.py): what it answers from memory is what it
would answer meeting every text for the first time, whatever the texts (peers send any)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import geo
from crawler.counters.marks import Fingerprinter
from crawler.counters.met_ips import SKIP_FILLS, MetIPs
from tests.mmdb import write_city_db

LOCATOR = geo.open_locator(write_city_db(Path(tempfile.mkdtemp()) / "city.mmdb"))
SECRET = b"s" * 32

# One IP in several spellings (each the same packed IP), others, and text that is no IP.
TEXTS = ["1.1.1.1", "::ffff:1.1.1.1", "::FFFF:1.1.1.1", " 1.1.1.1", "1.1.1.2", "2.2.2.2", "2001:db8::1",
         "2001:DB8::1", "2001:db8:0::1", "1.1.1.01", "", "x", "1.1.1.1\x00", "\udcff"]
TEXT = st.sampled_from(TEXTS) | st.text(max_size=12)


def one_by_one(texts) -> list:
    """What a new MetIPs answers meeting ``texts`` one at a time, each packed IP's first kept."""
    m = MetIPs(LOCATOR, Fingerprinter(SECRET, 64))
    first: dict = {}
    for t in texts:
        for got in m.visit([t]):
            first.setdefault(got[0], got)
    return list(first.values())


@given(st.lists(TEXT, max_size=30), st.lists(st.lists(TEXT, max_size=30), min_size=1, max_size=4), st.booleans())
def test_an_ip_met_before_is_answered_as_if_met_now(met_before, visits, as_set):
    met = MetIPs(LOCATOR, Fingerprinter(SECRET, 64))
    met.visit(met_before)  # some texts met before, others not
    for v in visits:
        texts = frozenset(v) if as_set else v
        got = met.visit(texts)
        assert got == one_by_one(texts)
        assert len({m[0] for m in got}) == len(got)  # each packed IP once


@given(st.lists(st.lists(TEXT, max_size=12), min_size=1, max_size=30))
def test_a_small_memory_that_starts_over_and_leaves_meets_unkept_answers_the_same(visits):
    met = MetIPs(LOCATOR, Fingerprinter(SECRET, 64), memo=4)
    for v in visits:
        assert met.visit(v) == one_by_one(v)
        assert len(met.texts) <= 4 + len(v)


def test_a_memory_seldom_found_keeps_nothing_for_a_while_then_keeps_again():
    met = MetIPs(LOCATOR, Fingerprinter(SECRET, 64), memo=10)
    texts = [f"1.1.{i // 250}.{i % 250 + 1}" for i in range(2000)]
    met.visit(texts[:11])  # a fill, every meet a miss
    met.visit(texts[11:12])  # past the memory: it starts over, and keeps nothing ...
    assert met.texts == {} and met.unkept == SKIP_FILLS * 10 - 1
    for t in texts[12:12 + SKIP_FILLS * 10 - 1]:
        met.visit([t])
    assert met.texts == {} and met.unkept == 0
    met.visit(texts[:3])  # ... then keeps again
    assert len(met.texts) == 3
    # a fill whose meets mostly found the memory goes on keeping
    again = MetIPs(LOCATOR, Fingerprinter(SECRET, 64), memo=10)
    for _ in range(4):
        again.visit(texts[:9])
    again.visit(texts[9:12])  # full: 27 of 39 meets found it
    again.visit(texts[12:13])
    assert again.unkept == 0 and len(again.texts) == 1


@given(st.lists(TEXT, max_size=30), st.lists(st.lists(TEXT, max_size=30), min_size=1, max_size=4))
def test_packed_ips_are_met_as_their_texts_would_be_whichever_form_came_first(met_before, visits):
    """A compact list's IPs come packed (``ip_forms.PackedIPs``): each met as its texts are, in a
    process that met some of them as texts before, and the other way round."""
    from crawler.counters.ip_forms import PackedIPs, normalize_ip

    met = MetIPs(LOCATOR, Fingerprinter(SECRET, 64))
    met.visit(met_before)
    for v in visits:
        packed = PackedIPs(p for p in map(normalize_ip, v) if p is not None)
        got = met.visit(packed)
        assert sorted(got) == sorted(one_by_one(v))
        assert sorted(met.visit(v)) == sorted(got)
