"""Swarm records (crawler/counters/swarm_record.py): a revisit of the same peers at the same places is
settled by one lookup, and never while one of their marks could count again.

Each test records through a real ``Recorder`` on the test Redis and reads the
marks back; the counts are checked against what the marks alone would give.
"""

from __future__ import annotations

import calendar
import ipaddress
import os
import shutil

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import geo
from crawler.counters import Recorder
from crawler.counters.ip_forms import packed_ips
from crawler.counters.marks import parse_bucket
from crawler.counters.names import info_hash_hex
from crawler.counters.swarm_record import Lookups, swarm_of_ips
from crawler.keys import Keys
from crawler.store.scripts import register
from geo import Place
from tests.mmdb import write_city_db

T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
DAY = 86400
H = "ab" * 20
A, B, C = "1.1.1.1", "1.1.1.2", "2.2.2.2"


@pytest.fixture
def locator(tmp_path):
    return geo.open_locator(write_city_db(tmp_path / "city.mmdb"))


def record_of(rec: Recorder, client, h: str, ips: list[str]) -> int | None:
    """The time of the swarm record of a visit of ``ips`` on ``h`` (in shard 0), None: none."""
    t_fp = rec.fingerprints.torrent(info_hash_hex(h))
    bucket, field = swarm_of_ips(rec.fingerprints, t_fp, packed_ips(ips), rec.fingerprints.buckets,
                                 rec.locator.identity)
    raw = client.get(rec._home(h).bucket(bucket)) or b""
    return dict(parse_bucket(raw)).get(field)


def test_a_revisit_of_the_same_swarm_ends_at_its_record(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(H, [A, B, C], T0, probe=False) == 3
    # the first visit's IPs all went to one record call: it wrote the record, at the visit's time
    assert record_of(rec, client, H, [A, B, C]) == T0
    assert rec.record_visit(H, [C, A, B], T0 + 60) == 0  # the order of the peers does not matter
    assert rec.swarms.known == 1
    # a peer more or less is another swarm: probed, and the new peer counts
    assert rec.record_visit(H, [A, B], T0 + 120) == 0
    assert rec.record_visit(H, [A, B, C, "2.2.2.3"], T0 + 180) == 1
    assert rec.swarms.known == 1
    # the probe that found every IP of [A, B] fresh wrote that swarm's record, at its oldest record
    assert record_of(rec, client, H, [A, B]) == T0
    assert rec.record_visit(H, [B, A], T0 + 240) == 0
    assert rec.swarms.known == 2


def test_the_record_lasts_as_long_as_the_oldest_mark_of_its_peers(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(H, [A], T0, probe=False) == 1
    # 20 days on, B joins: A is fresh (the probe leaves it out), so no call sees both: no record
    assert rec.record_visit(H, [A, B], T0 + 20 * DAY) == 1
    assert record_of(rec, client, H, [A, B]) is None
    # the next revisit probes, finds both fresh and writes the record at A's time, not B's
    assert rec.record_visit(H, [A, B], T0 + 20 * DAY + 60) == 0
    assert record_of(rec, client, H, [A, B]) == T0
    assert rec.record_visit(H, [A, B], T0 + 30 * DAY - 1) == 0
    assert rec.swarms.known == 1
    # once A's marks are a window old (30 days), the record is too: A counts again, B does not
    assert rec.record_visit(H, [A, B], T0 + 30 * DAY) == 1
    assert rec.swarms.known == 1
    # that visit's probe found A stale, so no call saw both: the record is the stale one
    assert record_of(rec, client, H, [A, B]) == T0
    assert rec.record_visit(H, [A, B], T0 + 30 * DAY + 1) == 0
    assert record_of(rec, client, H, [A, B]) == T0 + 20 * DAY  # renewed: B's marks are now the oldest
    assert rec.record_visit(H, [A, B], T0 + 30 * DAY + 2) == 0
    assert rec.swarms.known == 2


def test_a_peer_placed_elsewhere_is_another_swarm(client, keys, settings, locator):
    """A GeoIP update moves a peer: its new place's marks are missing, so the swarm record must not
    vouch for them."""
    rec = Recorder(client, keys, settings, locator)
    ip = ipaddress.ip_address(A).packed
    berlin, paris = Place("Germany", "Berlin", "10115"), Place("France", "Paris", "75001")
    assert rec.record_places_many([(H, [(ip, berlin)])], T0, [False]) == [1]
    assert rec.record_places_many([(H, [(ip, berlin)])], T0 + 60) == [0]
    assert rec.swarms.known == 1
    assert rec.record_places_many([(H, [(ip, paris)])], T0 + 120) == [0]  # the torrent's mark is fresh
    assert rec.swarms.known == 1
    france = client.zscore(keys.index("all", ("countries",)), "France")
    assert france == 1  # but France counts the peer


def test_a_visit_split_over_record_calls_writes_no_record_until_its_probe(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator, batch_pairs=8)  # an IP a call
    ips = [f"1.1.1.{n}" for n in range(1, 6)]
    assert rec.record_visit(H, ips, T0, probe=False) == 5
    assert record_of(rec, client, H, ips) is None
    assert rec.record_visit(H, ips, T0 + 60) == 0
    assert rec.swarms.known == 0
    assert record_of(rec, client, H, ips) == T0
    assert rec.record_visit(H, ips, T0 + 120) == 0
    assert rec.swarms.known == 1


def test_several_counter_shards_write_the_record_at_the_probe(client, namespace, settings, locator):
    keys = Keys(namespace, 3)
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(H, [A, B, C], T0, probe=False) == 3
    assert rec.record_visit(H, [A, B, C], T0 + 60) == 0
    assert rec.swarms.known == 0
    assert rec.record_visit(H, [A, B, C], T0 + 120) == 0
    assert rec.swarms.known == 1
    assert rec.record_visit(H, [A, B, C], T0 + 30 * DAY) == 3


def test_malformed_swarm_arguments_are_refused_before_any_write(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    probe = register(client, "probe", package="crawler.counters")
    shard = rec._home(H)
    before = sorted(client.scan_iter(match=keys.mark_buckets_match))
    for swarm in (b"\x00\x01" + b"x" * 7, b"\x00\x02" + b"x" * 8, b"\x00\x00" + b"x" * 8):
        with pytest.raises(redis.ResponseError, match="malformed swarm record"):
            probe(keys=[shard.torrents, shard.bucket(0)], args=[T0 - 30 * DAY, H, b"", swarm])
    # the torrent's first roster bucket and width base (probe.lua's ARGV[5])
    for widths in (b"\x00\x01" + b"w" * 6, b"\x00\x02" + b"w" * 7, b"\x00\x00" + b"w" * 7, b""):
        with pytest.raises(redis.ResponseError, match="malformed widths"):
            probe(keys=[shard.torrents, shard.bucket(0)], args=[T0 - 30 * DAY, H, b"", b"", widths])
    record = register(client, "record", package="crawler.counters")
    visit = H.encode() + (6).to_bytes(2, "big") + (1).to_bytes(4, "big")
    fixed = [shard.outbox, *shard.shared("2024-05"), *shard.torrent_keys(H, "2024-05")]
    for swarms in (b"\x00\x01\x00\x01" + b"x" * 7, b"\x00\x02\x00\x01" + b"x" * 8, b"\x00\x01\x00\x02" + b"x" * 8):
        with pytest.raises(redis.ResponseError, match="swarm record"):
            record(keys=[*fixed, shard.bucket(0)],
                   args=[T0, T0 - 30 * DAY, visit, "--", b"", b"", len(fixed), b"", "", swarms])
    assert sorted(client.scan_iter(match=keys.mark_buckets_match)) == before


@pytest.mark.parametrize("same_process", [True, False])
def test_a_first_visit_dates_its_record_by_the_peers_older_place_marks(client, keys, settings, locator,
                                                                       same_process):
    """record.lua writes a first visit's record at the oldest mark of its peers: a peer's place marks may
    date from another swarm (sent whole, or as a torrent part when this process learned their time)."""
    rec = Recorder(client, keys, settings, locator)
    other = "cd" * 20
    assert rec.record_visit(other, [A], T0, probe=False) == 1
    if not same_process:
        rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(H, [A], T0 + 20 * DAY, probe=False) == 1
    assert record_of(rec, client, H, [A]) == T0
    germany = keys.index("all", ("countries",))
    assert client.zscore(germany, "Germany") == 1
    assert rec.record_visit(H, [A], T0 + 30 * DAY - 1) == 0
    assert rec.swarms.known == 1
    # the place marks expire with the window: Germany counts the peer again through this torrent
    assert rec.record_visit(H, [A], T0 + 30 * DAY) == 0
    assert rec.swarms.known == 1
    assert client.zscore(germany, "Germany") == 2


def test_lookups_follow_whether_records_are_found():
    looks = Lookups()
    assert looks.first()  # at the start the records are asked for first
    looks.saw(1, 10)  # a batch of swarms that changed
    assert not looks.first()
    looks.saw(0, 0)  # no probed visit: nothing learned
    assert not looks.first()
    flips = 0
    while not looks.first():
        looks.saw(10, 10)
        flips += 1
    assert flips == 1


@pytest.mark.interpreted
def test_where_few_records_are_found_they_travel_with_the_probes(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    sent: list[int] = []
    send = rec._send  # a spy on the recorder's round trips: the calls still reach Redis

    def counted(calls, wait=None, own=False):
        sent.append(len(calls))
        return send(calls, wait, own)

    rec._send = counted
    assert rec.record_visit(H, [A, B, C], T0, probe=False) == 3
    rec.swarms.lookups.saw(0, 10)  # lately, no probed visit found its record
    sent.clear()
    assert rec.record_visit(H, [A, B, C], T0 + 60) == 0
    assert rec.swarms.known == 1 and sent == [1]  # one call, the probe, which the record answered
    # a swarm that changed: still the probe alone, and the new peer counts
    sent.clear()
    assert rec.record_visit(H, [A, B, C, "2.2.2.3"], T0 + 90) == 1
    assert sent == [1, 1]  # the probe, then the record call
    # records found again: after a few, they are asked for first again, one call a visit
    hits = 0
    while not rec.swarms.lookups.first():
        assert rec.record_visit(H, [A, B, C], T0 + 120 + hits) == 0
        hits += 1
        assert hits < 10
    sent.clear()
    assert rec.record_visit(H, [C, B, A], T0 + 200) == 0
    assert sent == [1] and rec.swarms.known == 2 + hits


def test_a_batch_counts_its_records_answers_once_where_it_asked_for_them(client, keys, settings, locator):
    """A batch whose records, asked for first, are not found (which turns the lookups to the probes)
    counts those answers once: its probes, which carry the records too, add nothing to the figure."""
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit(H, [A, B], T0, probe=False) == 2
    assert rec.swarms.lookups.first() and rec.swarms.lookups.asked == 0
    # the swarm gained a peer: its record is not found, and the visit goes on to its probe
    assert rec.record_visit(H, [A, B, C], T0 + 60) == 1
    assert (rec.swarms.lookups.found, rec.swarms.lookups.asked) == (0, 1) and not rec.swarms.lookups.first()


def test_a_record_asked_for_and_not_found_is_written_under_the_key_it_was_asked_by(client, keys, settings,
                                                                                   locator):
    """A first visit asks for its record (not found), then counts its peers and writes the record, keyed
    as it was asked for: another process's revisit of the swarm finds it having met nobody."""
    rec = Recorder(client, keys, settings, locator)
    assert rec.swarms.lookups.first()
    assert rec.record_visits([(H, [A, B, C])], T0) == [3]
    assert (rec.swarms.lookups.found, rec.swarms.lookups.asked) == (0, 1)
    again = Recorder(client, keys, settings, locator)
    assert again.record_visits([(H, [C, "::ffff:1.1.1.2", A])], T0 + 60) == [0] and again.swarms.known == 1
    assert again.met_ips.texts == {}


def test_a_revisit_by_another_process_is_settled_before_any_peer_is_met(client, keys, settings, locator):
    """A record keyed by the IPs alone is asked for before they are located or fingerprinted: a new
    process settles the revisit having met no peer."""
    assert Recorder(client, keys, settings, locator).record_visit(H, [A, B, C, "::ffff:2.2.2.3"], T0, probe=False) == 4
    rec = Recorder(client, keys, settings, locator)
    # the same swarm, in another order and spelling
    assert rec.record_visits([(H, [C, "2.2.2.3", B, A, "not an ip"])], T0 + 60) == [0]
    assert rec.swarms.known == 1
    assert rec.met_ips.texts == {}  # nobody met
    # another swarm is met and probed as before
    assert rec.record_visits([(H, [A, B])], T0 + 120) == [0]
    assert rec.swarms.known == 1 and set(rec.met_ips.texts) == {A, B}


def test_another_database_is_another_swarm(client, keys, settings, locator, tmp_path):
    """The key carries the locator's identity: under a database that places the peer elsewhere the
    record does not vouch for it, and its new place counts it."""
    assert Recorder(client, keys, settings, locator).record_visit(H, [A], T0, probe=False) == 1
    moved = geo.open_locator(write_city_db(tmp_path / "moved.mmdb", {"1.1.1.0/24": ("France", "Paris", "75001")}))
    assert moved.identity != locator.identity
    rec = Recorder(client, keys, settings, moved)
    assert rec.record_visit(H, [A], T0 + 60) == 0  # the torrent's mark is fresh
    assert rec.swarms.known == 0
    assert client.zscore(keys.index("all", ("countries",)), "France") == 1
    # the same database again is the same swarm, wherever its file lies and whatever its time (a fleet's
    # machines each install their own copy)
    copied = tmp_path / "copy" / "city.mmdb"
    copied.parent.mkdir()
    shutil.copy(locator.path, copied)
    os.utime(copied, (T0, T0))
    same = geo.open_locator(copied)
    assert same.identity == locator.identity
    again = Recorder(client, keys, settings, same)
    assert again.record_visit(H, [A], T0 + 120) == 0 and again.swarms.known == 1


def test_a_batch_that_met_a_read_error_writes_no_record(client, keys, settings, tmp_path):
    """An IP read in error is recorded without a place: no record may vouch for its place marks."""
    from tests.test_geo import damaged_networks, write_damaged_city_db

    nets, bad_ips, bad_codes = damaged_networks(30)
    damaged = geo.open_locator(write_damaged_city_db(tmp_path / "damaged.mmdb", nets, bad_codes))
    ips = [f"127.1.0.{i + 1}" for i in range(30)]
    rec = Recorder(client, keys, settings, damaged)
    assert rec.record_visit(H, ips, T0, probe=False) == 30
    assert damaged.read_errors > 0
    assert record_of(rec, client, H, ips) is None
    # the next visit probes again (and its read errors again write no record)
    assert rec.record_visit(H, ips, T0 + 60) == 0
    assert rec.swarms.known == 0 and record_of(rec, client, H, ips) is None


def test_a_swarm_key_joins_no_two_lists_of_addresses_alike(locator):
    """An IPv6 address among IPv4 ones gives each its length: a 16-byte address and a 4-byte one cannot
    join as a 4-byte one and a 16-byte one do."""
    from crawler.counters.marks import Fingerprinter

    fps = Fingerprinter(b"k" * 32)
    x, y = bytes(4), bytes(15) + b"\x01"
    p, q = (x + y)[:16], (x + y)[16:]  # x + y == p + q, sorted either way
    assert sorted([x, y]) == [x, y] and sorted([p, q]) == [p, q]
    assert fps.swarm_ips(7, [x, y], locator.identity) != fps.swarm_ips(7, [p, q], locator.identity)
    assert fps.swarm_ips(7, [x, y], locator.identity) == fps.swarm_ips(7, [y, x], locator.identity)
    assert fps.swarm_ips(7, [x], locator.identity) != fps.swarm_ips(7, [x], locator.identity + b"!")


_TEXTS = st.lists(st.one_of(st.ip_addresses().map(str), st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),
                            st.text(max_size=20)), max_size=300)


@given(texts=_TEXTS)
@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_key_read_before_meeting_is_the_key_written_after(texts, locator):
    """The record asked for from the IP texts alone is the one written from the met IPs, however they
    are spelt: else a revisit would never find it."""
    from crawler.counters.marks import Fingerprinter
    from crawler.counters.met_ips import MetIPs
    from crawler.counters.swarm_record import Swarms

    fps = Fingerprinter(b"k" * 32, buckets=1 << 18)
    swarms = Swarms(fps, locator)
    met = MetIPs(locator, fps).visit(texts)
    asked = swarms.of_texts([(H, texts)], None)
    if not met:
        assert asked == []
        return
    [(position, h, swarm)] = asked
    assert (position, h) == (0, H) and swarm == swarms.of_ips(fps.torrent(H), met)


@pytest.mark.interpreted
def test_a_batch_of_records_is_looked_up_in_one_call_per_shard_with_probe_luas_answers(client, namespace,
                                                                                         settings, locator):
    """swarm_check.lua answers each visit of a batch as probe.lua answers its record alone: fresh ("S"),
    expired, missing, a torrent never counted, several records in one bucket; one call a counter shard."""
    keys = Keys(namespace, 3, rosters=True)
    rec = Recorder(client, keys, settings.replace(namespace=namespace), locator)
    hashes = [f"{i:02x}" * 20 for i in range(1, 13)]
    swarms = {h: [f"1.1.{i}.{j}" for j in range(1, 2 + i % 4)] for i, h in enumerate(hashes)}
    early, late = hashes[:4], hashes[4:8]  # counted long ago (expired by the revisit), counted lately
    assert rec.record_visits([(h, swarms[h]) for h in early], T0, [False] * 4) == [len(swarms[h]) for h in early]
    assert rec.record_visits([(h, swarms[h]) for h in late], T0 + 29 * DAY, [False] * 4)
    # several counter shards write a swarm's record at its probe (a revisit finding every IP fresh)
    assert rec.record_visits([(h, swarms[h]) for h in early], T0 + 60) == [0] * 4
    assert rec.record_visits([(h, swarms[h]) for h in late], T0 + 29 * DAY + 60) == [0] * 4
    sent: list = []
    send = rec._send
    rec._send = lambda calls, *a, **kw: (sent.append([c[0] for c in calls]), send(calls, *a, **kw))[1]
    now = T0 + 30 * DAY + 60
    # the late ones settle; the early ones' records expired; the rest were never counted
    asked = rec.swarms.of_texts([(h, swarms[h]) for h in hashes], None)
    settled = rec._settled(now, asked)
    assert settled == {hashes.index(h) for h in late}
    assert len(sent[0]) == len({id(rec._home(h)) for h in hashes}) <= 3
    probe = register(client, "probe", package="crawler.counters")
    for position, h, (bucket, field) in asked:
        shard = rec._home(h)
        alone = probe(keys=[shard.torrents, shard.bucket(bucket)],
                      args=[now - rec.window, h, b"", b"\x00\x01" + field])
        assert (alone == b"S") == (position in settled)


def test_malformed_swarm_checks_are_refused_in_one_line(client, keys, settings, locator):
    rec = Recorder(client, keys, settings, locator)
    check = register(client, "swarm_check", package="crawler.counters")
    shard = rec._home(H)
    good = H.encode() + b"\x00\x01" + b"f" * 8
    assert check(keys=[shard.torrents, shard.bucket(0)], args=[T0, good + good]) == b"--"
    assert check(keys=[shard.torrents], args=[T0, b""]) == b""
    for records, why in ((good[:-1], "not whole 50-byte records"), (b"AB" * 20 + good[40:], "malformed record"),
                         (H.encode() + b"\x00\x02" + b"f" * 8, "malformed record"),
                         (H.encode() + b"\x00\x00" + b"f" * 8, "malformed record")):
        with pytest.raises(redis.ResponseError, match=why):
            check(keys=[shard.torrents, shard.bucket(0)], args=[T0, records])


@given(records=st.binary(max_size=300), buckets=st.integers(0, 3))
@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_are_refused_in_one_line_or_answered_a_byte_a_record(client, keys, records, buckets):
    shard_keys = [keys.counter_shard(0).mark_bucket(n) for n in range(buckets)]
    check = register(client, "swarm_check", package="crawler.counters")
    try:
        got = check(keys=[keys.counter_shard(0).index("all", ("torrents",)), *shard_keys], args=[T0, records])
    except redis.ResponseError as e:
        assert str(e).startswith("swarm_check.lua: ") and "\n" not in str(e)
    else:
        assert len(got) == len(records) // 50 and set(got) <= set(b"S-")
