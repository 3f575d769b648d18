"""The IPs a process has met (crawler/counters/met_ips.py): what it answers from memory is what it
would answer meeting every text for the first time, whatever the texts (peers send any)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import geo
from crawler.counters.marks import Fingerprinter
from crawler.counters.met_ips import MetIPs
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
