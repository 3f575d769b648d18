"""Torrent parts in blocks (record.lua's flagged visits): a torrent never visited has the torrent parts
of its IPs whose place marks the process knows are fresh sent a roster bucket at a time.

Each test records through real ``Recorder``s on the test Redis: blocks must leave every key as the
per-IP records would, a torrent counted after all must be sent again and counted once, and any
block bytes must be refused in one line with nothing written, or taken whole.
"""

from __future__ import annotations

import calendar
import contextlib

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import geo
from crawler.counters import DEFAULT_BATCH_PAIRS, Recorder, top
from crawler.counters.names import month_of
from crawler.keys import Keys
from crawler.store import scripts
from geo import Place
from tests.mmdb import write_city_db
from tests.namespaces import delete_namespace
from tests.test_completions import contents as completions_contents

T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
H = "ab" * 20
PLACES = [Place("Germany", "Berlin", "10115"), Place("United States", None, None), Place("Iceland", None, "101"),
          Place(None, None, None)]
# 24 addresses, each at one place
POOL = [(bytes([10, 0, 9, n]), PLACES[n % len(PLACES)]) for n in range(24)]


@pytest.fixture
def locator(tmp_path):
    return geo.open_locator(write_city_db(tmp_path / "city.mmdb"))


def contents(client: redis.Redis, namespace: str) -> dict:
    """``test_completions.contents`` of ``namespace``, a mark bucket's records as a sorted list (blocks
    add them in another order than records)."""
    out = completions_contents(client, namespace)
    for name, (kind, value, lives) in out.items():
        if kind == "string" and ":mk:" in name:
            out[name] = (kind, sorted(value[i:i + 12] for i in range(0, len(value), 12)), lives)
    return out


def sent_blocks(rec: Recorder) -> list:
    """Wraps ``rec``'s script calls: the list it returns fills with (flagged visits, reply) per record.lua call."""
    seen: list = []
    send = rec._send

    def spy(calls, wait=None, own=False):
        replies = send(calls, wait, own)
        for (script, _, args), reply in zip(calls, replies):
            if script is rec._record:
                visits = args[2]
                flagged = sum(visits[v + 42] >= 128 for v in range(0, len(visits), 46))
                seen.append((flagged, reply))
        return replies

    rec._send = spy
    return seen


@contextlib.contextmanager
def without_blocks(monkeypatch):
    """Every visit recorded meanwhile sends its torrent parts as records, never in blocks."""
    parts_of = Recorder._parts

    def records_only(self, *args):
        parts = parts_of(self, *args)
        for _, _, part, _ in parts:
            part.fresh = False
        return parts

    with monkeypatch.context() as m:
        m.setattr(Recorder, "_parts", records_only)
        yield


visit = st.tuples(st.sampled_from(["ab" * 20, "cd" * 20, "ef" * 20, "12" * 20, "34" * 20]),
                  st.lists(st.sampled_from(POOL), min_size=1, max_size=24),
                  st.integers(0, 40))  # days after the visit before it


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(st.lists(visit, min_size=1, max_size=4), min_size=1, max_size=5),
       batch_pairs=st.sampled_from([8, 13, DEFAULT_BATCH_PAIRS]), shards=st.sampled_from([1, 3]))
def test_blocks_leave_every_key_as_records_would(client, namespace, other_namespace, settings, locator, monkeypatch,
                                                 history, batch_pairs, shards):
    """Recordings of torrents, a torrent's first visit unprobed (its torrent parts in blocks), in calls
    of any size, days apart (marks expiring), in one counter shard or several (each IP's place part in
    its own shard, the torrent parts in the torrent's): every count, mark and index equals that of the same
    recordings sent as records. (A torrent counted after all is sent again, its IPs then packed as
    what the first try taught: the next test.)"""
    got = []
    for ns, blocks in ((namespace, True), (other_namespace, False)):
        delete_namespace(client, ns)
        keys = Keys(ns, shards, rosters=True)  # a new crawl's: a torrent's marks in its roster
        rec = Recorder(client, keys, settings.replace(namespace=ns), locator, batch_pairs=batch_pairs)
        with contextlib.ExitStack() as stack:
            if not blocks:
                stack.enter_context(without_blocks(monkeypatch))
            now, counted, seen = T0, [], set()
            for batch in history:
                now += batch[0][2] * 86400
                together = {h: located for h, located, _ in batch}  # distinct torrents in one recording
                # as a worker records them: a torrent's first visit unprobed, the others probed
                probes = [h in seen for h in together]
                counted.append(rec.record_places_many(list(together.items()), now, probes))
                seen.update(together)
        got.append((counted, contents(client, ns)))
    (counted_blocks, blocks_state), (counted_records, records_state) = got
    assert counted_blocks == counted_records
    assert blocks_state == records_state


@pytest.mark.interpreted
def test_a_new_torrents_parts_go_in_blocks_and_count_as_records(client, namespace, settings, locator):
    """A peer met in one swarm, then in a torrent never visited: its torrent part goes in a block,
    counted for the new torrent and not for its place again."""
    rec = Recorder(client, Keys(namespace, rosters=True), settings, locator)
    some = POOL[:8]
    assert rec.record_places_many([("cd" * 20, some)], T0, [False]) == [8]
    seen = sent_blocks(rec)
    assert rec.record_places_many([(H, some)], T0 + 60, [False]) == [8]
    assert [flagged for flagged, _ in seen] == [1]
    assert rec.record_places_many([(H, some)], T0 + 120) == [0]  # a revisit: nothing new


@pytest.mark.interpreted
@pytest.mark.parametrize("shards", [1, 3])
def test_blocks_of_a_torrent_counted_after_all_are_sent_again_as_records(client, namespace, settings, locator,
                                                                         shards):
    """A torrent a worker believes never counted (never visited) had its first visit recorded by
    another worker meanwhile: record.lua writes nothing and names it, and the recorder sends it
    again without blocks, each IP counting once."""
    keys = Keys(namespace, shards, rosters=True)
    a, b = Recorder(client, keys, settings, locator), Recorder(client, keys, settings, locator)
    assert a.record_places_many([("cd" * 20, POOL[:10])], T0, [False]) == [10]  # a learns their place marks
    assert b.record_places_many([(H, POOL[:6])], T0 + 30, [False]) == [6]
    seen = sent_blocks(a)
    assert a.record_places_many([(H, POOL[:10])], T0 + 60, [False]) == [4]
    assert seen[0] == (1, [b"unfresh", b"1"]) and seen[1][0] == 0 and len(seen) == 2
    assert a.record_places_many([(H, POOL[:10])], T0 + 90) == [0]
    assert {r["metric"]: r["count"] for r in top(client, keys, "torrents")} == {
        f"torrents.{'cd' * 20}.users": 10, f"torrents.{H}.users": 10}
    assert {r["metric"]: r["count"] for r in top(client, keys, "countries")} == {
        f"countries.{c}.users": 10 // 4 + (i < 10 % 4) for i, c in enumerate(("Germany", "United States", "Iceland"))}


def block_call(rec: Recorder, blocks: bytes, count: int = 0, flagged: bool = True):
    """record.lua's keys and arguments for one flagged visit of ``H`` in a mixed call (one bucket, two
    places: Germany with a city and a postcode, and no country), its records ``blocks``."""
    shard = rec._shards[0]
    fixed = shard.shared(month_of(T0)) + shard.torrent_keys(H, month_of(T0)) + shard.country_keys(
        "Germany", month_of(T0))
    country = (len(shard.shared("x")) + len(shard.torrent_keys(H, "x")) + 1).to_bytes(2, "big") + b"\x00\x07Germany"
    places = (1).to_bytes(2, "big") + b"\x00\x06Berlin\x00\x0510115" + (0).to_bytes(2, "big") + bytes(4)
    visits = H.encode() + (len(shard.shared("x")) + 1).to_bytes(2, "big") + (count | flagged << 31).to_bytes(4, "big")
    args = [int(T0), int(T0) - rec.window, visits, "--", country, places, len(fixed), blocks, "M"]
    return fixed + [rec._shards[0].bucket(1)], args


def block(m: list[tuple[int, int]], groups: list[int], fields: int, bucket: int = 1, made: int = int(T0)) -> bytes:
    """A block: its bucket, (place, IPs) pairs, group records at the given times, ``fields`` torrent
    marks made at ``made`` (a call's marks are made at its time, ``T0`` in ``block_call``)."""
    out = bucket.to_bytes(2, "big") + len(m).to_bytes(2, "big")
    out += b"".join(p.to_bytes(2, "big") + n.to_bytes(2, "big") for p, n in m)
    out += b"".join(b"G" * 8 + t.to_bytes(4, "big") for t in groups)
    return out + (b"F" * 8 + made.to_bytes(4, "big")) * fields


def test_a_malformed_block_writes_nothing(client, keys, settings, locator):
    """record.lua checks a flagged visit's blocks before its first write; a well-formed one counts."""
    rec = Recorder(client, keys, settings, locator)
    record = scripts.register(client, "record", package="crawler.counters")
    fresh = int(T0) - 60
    # Germany, Berlin, 10115: four torrent fields and a group record an IP; no country: one field
    good = (1).to_bytes(2, "big") + block([(1, 2), (2, 1)], [fresh, fresh], 4 * 2 + 1)
    bad = [
        (b"", "malformed block count"),
        (good[:-1], "malformed block"),  # a field short
        ((1).to_bytes(2, "big") + block([(1, 2)], [fresh, fresh], 7), "malformed block"),
        ((1).to_bytes(2, "big") + block([(3, 1)], [fresh], 4), "malformed block"),  # no place 3
        ((1).to_bytes(2, "big") + block([(1, 0)], [], 0), "malformed block"),  # no IPs at a place
        ((1).to_bytes(2, "big") + block([(2, 1)], [], 1, bucket=2), "malformed block"),  # no bucket 2
        ((1).to_bytes(2, "big") + block([], [], 0), "malformed block"),
        ((1).to_bytes(2, "big") + block([(1, 1)], [int(T0) - rec.window], 4), "out of the window"),
        ((1).to_bytes(2, "big") + block([(1, 1)], [int(T0) + 1], 4), "out of the window"),
        ((1).to_bytes(2, "big") + block([(1, 1)], [fresh], 4, made=fresh), "not made now"),
        ((2).to_bytes(2, "big") + good[2:], "malformed block"),  # two blocks said, one sent
        (good + b"\x00", "malformed peer record"),  # a record the visit does not count
    ]
    keys_, args = block_call(rec, good)
    before = {k: client.dump(k) for k in keys_}
    for blocks, error in bad:
        args[7] = blocks
        with pytest.raises(redis.ResponseError, match=error):
            record(keys=keys_, args=args)
    # a flagged visit in a call of whole records, or with extra buckets
    args[7] = good
    with pytest.raises(redis.ResponseError, match="malformed visit"):
        record(keys=keys_, args=args[:8] + [""])
    widths = (1).to_bytes(2, "big") + bytes([0, 3, 1]) + b"W" * 7
    with pytest.raises(redis.ResponseError, match="malformed widths"):
        record(keys=keys_, args=args + [b"", widths, b"\x00\x01" * 3])
    assert {k: client.dump(k) for k in keys_} == before
    assert record(keys=keys_, args=args) == [3, b""]
    # counted here now: the same call is answered, unwritten
    after = {k: client.dump(k) for k in keys_}
    assert record(keys=keys_, args=args) == [b"unfresh", b"1"]
    assert {k: client.dump(k) for k in keys_} == after


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_blocks_are_refused_in_one_line_or_taken_whole(client, keys, settings, locator, data):
    """A flagged visit's records of any bytes, cut anywhere, counts and times on both sides of their
    bounds (past a u16 of IPs): a one-line error naming record.lua with nothing written, or a call that
    counts what its blocks hold."""
    rec = Recorder(client, keys, settings, locator)
    record = scripts.register(client, "record", package="crawler.counters")
    t = st.sampled_from([int(T0) - rec.window, int(T0) - rec.window + 1, int(T0), int(T0) + 1, 0, 2 ** 32 - 1])
    pairs = st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0, 1, 2, 65535])), max_size=3)
    made = st.builds(lambda n, bs: n.to_bytes(2, "big") + b"".join(bs), st.integers(0, 3),
                     st.lists(st.builds(block, pairs, st.lists(t, max_size=4), st.integers(0, 12),
                                        st.integers(0, 2), st.sampled_from([int(T0), int(T0) - 1])), max_size=3))
    blocks = data.draw(st.one_of(made, st.binary(max_size=80), made.map(lambda b: b[:len(b) // 2])))
    count = data.draw(st.integers(0, 1))
    keys_, args = block_call(rec, blocks + (b"" if not count else bytes(1) + bytes(64)), count)
    try:
        before = {k: client.dump(k) for k in keys_}
        try:
            got = record(keys=keys_, args=args)
        except redis.ResponseError as e:
            assert str(e).startswith("record.lua: ") and "\n" not in str(e), str(e)
            assert {k: client.dump(k) for k in keys_} == before
        else:
            assert isinstance(got[0], int) and got[0] >= 0
    finally:
        client.delete(*keys_)
