"""Hostile bytes from a real HTTP tracker end as typed failures of that tracker, never as exceptions."""

from __future__ import annotations

import os

import pytest

from crawler.sources import http_codec as h
from crawler.sources.trackers import Trackers
from tests.hostile import GOOD_PEERS, HostileHttpTracker


@pytest.fixture
def http_tracker():
    t = HostileHttpTracker()
    yield t
    t.close()


@pytest.fixture
def trackers(settings, client, keys):
    t = Trackers(settings.replace(http_timeout=2.0), client, keys, backoff_threshold=1000, stop_timeout=0.5)
    yield t
    t.close()


@pytest.mark.parametrize("path, why", [
    ("/superscript", "HttpReplyError: bad Content-Length '²'"),
    ("/hexchunk", "HttpReplyError: bad chunk size b'0x"),
    ("/bigint", "integer at offset"),
    ("/bigcount", "'complete' of 13 digits is past any swarm's size"),
])
def test_hostile_numbers_are_typed_failures(http_tracker, trackers, path, why):
    r = trackers.announce(http_tracker.base + path, os.urandom(20).hex())
    assert not r.ok and why in r.error, r.error


def test_an_interval_past_any_float_use_is_clamped(http_tracker, trackers):
    r = trackers.announce(http_tracker.base + "/farinterval", os.urandom(20).hex())
    assert r.ok, r.error
    assert set(r.peers) >= set(GOOD_PEERS)
    assert r.interval == r.min_interval == float(h.MAX_INTERVAL)
