"""BEP 33's bloom filters: its test vector, unions, the estimate's two ends and its error."""

from __future__ import annotations

import ipaddress
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.sources.dht import dht_bloom as b

# BEP 33, "Test Vectors": 192.0.2.0-255 and 2001:db8::-2001:db8::3e7 give these bytes and 1224.9308.
VECTOR = bytes.fromhex("""
 F6C3F5EA A07FFD91 BDE89F77 7F26FB2B FF37BDB8 FB2BBAA2 FD3DDDE7 BACFFF75 EE7CCBAE
 FE5EEDB1 FBFAFF67 F6ABFF5E 43DDBCA3 FD9B9FFD F4FFD3E9 DFF12D1B DF59DB53 DBE9FA5B
 7FF3B8FD FCDE1AFB 8BEDD7BE 2F3EE71E BBBFE93B CDEEFE14 8246C2BC 5DBFF7E7 EFDCF24F
 D8DC7ADF FD8FFFDF DDFFF7A4 BBEEDF5C B95CE81F C7FCFF1F F4FFFFDF E5F7FDCB B7FD79B3
 FA1FC77B FE07FFF9 05B7B7FF C7FEFEFF E0B8370B B0CD3F5B 7F2BD93F EB4386CF DD6F7FD5
 BFAF2E9E BFFFFEEC D67ADBF7 C67F17EF D5D75EBA 6FFEBA7F FF47A91E B1BFBB53 E8ABFB57
 62ABE8FF 237279BF EFBFEEF5 FFC5FEBF DFE5ADFF ADFEE1FB 737FFFFB FD9F6AEF FEEE76B6
 FD8F72EF""".replace(" ", "").replace("\n", ""))

ips = st.ip_addresses().map(str)


def vector_ips() -> list[str]:
    v4 = [str(ipaddress.IPv4Address("192.0.2.0") + i) for i in range(256)]
    v6 = [str(ipaddress.IPv6Address("2001:db8::") + i) for i in range(0x3E8 + 1)]
    return v4 + v6


def test_bep33_test_vector():
    bloom = b.of_ips(vector_ips())
    assert bloom == VECTOR
    assert b.estimate(bloom) == pytest.approx(1224.9308, abs=1e-4)


def test_packed_and_text_addresses_insert_alike():
    assert b.of_ips(["192.0.2.7", "2001:db8::1"]) == b.of_ips([bytes([192, 0, 2, 7]), ipaddress.ip_address("2001:db8::1").packed])
    with pytest.raises(ValueError):
        b.of_ips([b"\x01\x02\x03"])
    with pytest.raises(ValueError):
        b.union([bytes(255)])


@given(st.lists(ips, max_size=60), st.lists(ips, max_size=60))
def test_union_is_the_filter_of_the_union(a, c):
    assert b.union([b.of_ips(a), b.of_ips(c)]) == b.of_ips(a + c)
    assert b.estimate(b.of_ips(a + a)) == b.estimate(b.of_ips(a))  # an IP counts once


def test_the_two_ends():
    assert b.estimate(b.EMPTY) == 0.0 and b.union([]) == b.EMPTY
    full = b"\xff" * 256
    assert b.saturated(full) and not b.plausible(full)
    assert 7800 < b.estimate(full) < 7810
    one = b.of_ips(["192.0.2.1"])
    assert b.estimate(one) == pytest.approx(1.0, abs=0.001) and b.plausible(one)


def test_standard_error_matches_random_sets():
    rng = random.Random(7)
    for n in (200, 2000):
        estimates = [b.estimate(b.of_ips(rng.getrandbits(32).to_bytes(4, "big") for _ in range(n)))
                     for _ in range(120)]
        sigma = b.standard_error(n)
        assert abs(statistics.mean(estimates) - n) < sigma  # 120 sets: the mean is within sigma / 3.6 or so
        assert 0.75 * sigma < statistics.stdev(estimates) < 1.3 * sigma
    assert b.standard_error(0) == 0.0
    assert [round(b.standard_error(n), 1) for n in (20, 200, 2000)] == [0.3, 3.2, 45.8]
