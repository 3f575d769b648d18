"""Each counter script driven at the largest input the code can send, counts exact.

A visit may carry up to 2 x (max peers per source) x (sources) peers: several
thousand. ``record_visit`` cuts them into probe.lua calls of ``PROBE_IPS`` IPs
and record.lua calls of ``batch_pairs`` pairs; here both limits are also
lifted far past Lua's unpack() limit (~8,000 values), so each script sees
more keys in one call than a single unpack could hold, over hundreds of places.
Every counter must equal the distinct IPs per metric, and sweep.lua must
remove exactly the expired marks.
"""

from __future__ import annotations

import ipaddress
from collections import Counter

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

import geo
from crawler.counters import Recorder, metrics_for, top
from crawler.counters import recorder as recorder_module
from crawler.counters.names import month_of
from crawler.keys import Keys
from crawler.store import scripts
from tests.mmdb import write_city_db

T0 = 1_715_342_400  # 2024-05-10 12:00 UTC
H = "5e" * 20
N_IPS = 9000


def places_db(tmp_path):
    """20 countries x 30 cities (every 3rd without a postcode, every 10th country without cities)."""
    nets = {}
    for c in range(20):
        for y in range(30):
            net = f"10.{c}.{y}.0/24"
            if c % 10 == 9:
                nets[net] = (f"Land {c}", None, None)
            else:
                nets[net] = (f"Land {c}", f"Town {c}.{y}", None if y % 3 == 0 else f"{c:02d}{y:03d}")
    return write_city_db(tmp_path / "places.mmdb", nets)


def peers(n: int, offset: int = 0) -> list[str]:
    """``n`` distinct IPs over the 600 places, plus every 7th unmapped (11.x)."""
    out = []
    for i in range(offset, offset + n):
        if i % 7 == 0:
            out.append(str(ipaddress.IPv4Address("11.0.0.0") + i))
        else:
            p = i % 600
            out.append(f"10.{p // 30}.{p % 30}.{i // 600 % 250 + 1}")
    assert len(set(out)) == n
    return out


def expected(locator, visits) -> dict:
    pairs = set()
    for h, ips in visits:
        for ip in ips:
            p = locator.locate(ip)
            for m in metrics_for(h, p.country, p.city, p.postcode):
                pairs.add((m.name, ip))
    return dict(Counter(name for name, _ in pairs))


def counters(client, keys, torrents) -> dict:
    out = {}
    for fam in ("countries", "cities", "postcodes"):
        out.update({r["metric"]: r["count"] for r in top(client, keys, fam, limit=100_000)})
        for h in torrents:
            out.update({r["metric"]: r["count"] for r in top(client, keys, fam, torrent=h, limit=100_000)})
    out.update({r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=100_000)})
    return out


def marks_held(client, keys, buckets: int) -> int:
    """Records in every mark bucket of every counter shard (each a whole number of 12-byte records)."""
    total = 0
    per = buckets // keys.counter_shards
    for shard in keys.all_counter_shards:
        for first in range(0, per, 4096):
            p = client.pipeline(transaction=False)
            for n in range(first, min(first + 4096, per)):
                p.strlen(shard.mark_bucket(n))
            for n, size in enumerate(p.execute(), first):
                assert size % 12 == 0, n
                total += size // 12
    return total


@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("huge", [False, True], ids=["as-sent", "limits-lifted"])
def test_probe_record_and_sweep_at_their_largest_calls(huge, shards, client, keys, settings, tmp_path, monkeypatch):
    """One shard: probe.lua and record.lua; four: probe.lua, places.lua in every shard and
    record.lua's torrent part in the torrent's."""
    keys = Keys(keys.namespace, shards)
    db = places_db(tmp_path)
    loc = geo.open_locator(db)
    s = settings.replace(stathat_ezkey="k", stathat_families=("countries", "torrents"))
    if huge:
        # one probe.lua call and one record.lua call for the whole visit
        monkeypatch.setattr(recorder_module, "PROBE_IPS", 20_000)
        rec = Recorder(client, keys, s, loc, mark_buckets=1 << 16, batch_pairs=10**6)
    else:
        rec = Recorder(client, keys, s, loc, mark_buckets=1 << 16)
    first, second = peers(N_IPS), peers(N_IPS, offset=N_IPS // 2)  # half of the second visit is new
    assert rec.record_visit(H, first, T0) == N_IPS
    # the torrent is known now: probe.lua reads the buckets of every IP
    assert rec.record_visit(H, second, T0 + 60) == N_IPS // 2
    visits = [(H, first), (H, second)]
    want = expected(loc, visits)
    assert len({m for m in want if m.startswith("countries.")}) > 900  # many places
    assert counters(client, keys, [H]) == want
    box = Counter()
    for shard in keys.all_counter_shards:
        box.update({k.decode(): int(v) for k, v in client.hgetall(shard.outbox).items()})
    assert dict(box) == want  # every family is posted with an ezkey
    # sweep.lua over every bucket: nothing is stale yet, then everything is
    held = marks_held(client, keys, 1 << 16)
    assert held > 1.5 * N_IPS * 5
    assert rec.sweep(budget=1 << 16, now=T0 + 120) == 0
    assert rec.sweep(budget=1 << 16, now=T0 + 60 + rec.window + 1) == held
    assert marks_held(client, keys, 1 << 16) == 0


def test_a_new_torrents_indexes_past_a_slice_of_members_hold_every_one(client, keys, settings, tmp_path,
                                                                       monkeypatch):
    """A torrent never counted, one visit of 4,500 IPs in 4,500 towns, recorded in one call: its own
    towns index (lifetime and month) is written unread, in slices of 1,000 members (unpack() of
    9,000 values would pass Lua's stack limit); every town is there, counted once."""
    towns = 4500
    nets = {f"10.{t // 250}.{t % 250}.0/24": (f"Land {t % 3}", f"Town {t}", None) for t in range(towns)}
    loc = geo.open_locator(write_city_db(tmp_path / "towns.mmdb", nets))
    monkeypatch.setattr(recorder_module, "PROBE_IPS", 20_000)
    rec = Recorder(client, keys, settings, loc, mark_buckets=1 << 16, batch_pairs=10**6)
    assert rec.record_visit(H, [f"10.{t // 250}.{t % 250}.7" for t in range(towns)], T0) == towns
    for month, suffix in ((None, ""), (month_of(T0), f".{month_of(T0)}")):
        want = {f"torrents.{H}.countries.Land {t % 3}.cities.Town {t}.users{suffix}": 1 for t in range(towns)}
        got = {r["metric"]: r["count"] for r in top(client, keys, "cities", torrent=H, month=month, limit=10_000)}
        assert got == want, month
    countries = {r["metric"]: r["count"] for r in top(client, keys, "countries", torrent=H, limit=100)}
    assert countries == {f"torrents.{H}.countries.Land {c}.users": towns // 3 + (c < towns % 3) for c in range(3)}


@pytest.mark.interpreted
def test_a_call_of_more_visits_than_unpack_takes_reads_each_torrent_as_counted_or_not(client, keys, settings,
                                                                                    tmp_path):
    """record.lua asks the lifetime torrents index about its visits' torrents in slices of 1,000
    (unpack() of more than ~8,000 values passes Lua's stack limit): 8,500 torrents, one call each
    time. Twice, unprobed, the second with one IP of the first again: a torrent read as never
    counted would have that IP's mark written unread and counted twice."""
    loc = geo.open_locator(write_city_db(tmp_path / "city.mmdb"))
    rec = Recorder(client, keys, settings, loc, mark_buckets=1 << 16, batch_pairs=10**6)
    hashes = [f"{i:040x}" for i in range(1, 8501)]
    calls = []
    real_run = rec.store.run

    def run(batch, *a, **kw):
        calls.extend(script for script, _, _ in batch if script is rec._record)
        return real_run(batch, *a, **kw)

    rec.store.run = run
    assert rec.record_visits([(h, ["9.9.9.9"]) for h in hashes], T0, [False] * len(hashes)) == [1] * len(hashes)
    assert rec.record_visits([(h, ["9.9.9.9", "9.9.9.8"]) for h in hashes], T0 + 60,
                             [False] * len(hashes)) == [1] * len(hashes)
    assert len(calls) == 2
    got = {r["metric"]: r["count"] for r in top(client, keys, "torrents", limit=10_000)}
    assert got == {f"torrents.{h}.users": 2 for h in hashes}


def test_visited_counts_thousands_of_torrents_once_each(client, keys, settings, tmp_path):
    rec = Recorder(client, keys, settings.replace(stathat_ezkey="k"), geo.open_locator(places_db(tmp_path)))
    hashes = [f"{i:040x}" for i in range(3000)]
    firsts = sum(rec.visited(h, T0) for h in hashes + hashes[:1000])
    assert firsts == 3000
    assert int(client.hget(keys.outbox, "torrents.processed")) == 3000
    assert rec.visited(hashes[0], T0 + 3600)  # a new clock hour counts it again


def visit_arg(h: str, ips: int, pos: int = 6) -> bytes:
    """record.lua's ARGV[3] for one visit whose six index keys follow the shared ones."""
    return h.encode() + pos.to_bytes(2, "big") + ips.to_bytes(4, "big")


def test_a_malformed_record_call_writes_nothing(client, keys, settings, tmp_path):
    """record.lua checks its whole input before its first write."""
    import redis

    rec = Recorder(client, keys, settings, geo.open_locator(places_db(tmp_path)))
    record = scripts.register(client, "record", package="crawler.counters")  # as the recorder calls it
    shard = rec._shards[0]
    fixed = shard.shared("2024-05") + shard.torrent_keys(H, "2024-05")
    bucket = keys.mark_bucket(1)
    # a whole k=1 record (no group record: no roster bucket), then a truncated one: nothing may be written
    rec_ok = bytes(2) + (1).to_bytes(2, "big") + bytes(2) + (1).to_bytes(2, "big") + bytes([1]) + b"A" * 8
    place = (0).to_bytes(2, "big") + bytes(4)
    args = [T0, T0 - rec.window, visit_arg(H, 2), "--", b"", place, len(fixed), rec_ok + rec_ok[:10]]
    with pytest.raises(redis.ResponseError, match="malformed peer record"):
        record(keys=fixed + [bucket], args=args)
    bad_visits = [
        (visit_arg(H, 1)[:-1], "not whole 46-byte records"),
        (b"", "not whole 46-byte records"),
        (visit_arg(H.upper(), 1), "malformed visit"),  # not lower-case hex
        (visit_arg(H, 1, pos=5), "malformed visit"),  # a shared index's position
        (visit_arg(H, 1, pos=len(fixed) - 4), "malformed visit"),  # past the keys before the buckets
        (visit_arg(H, 0), "malformed visit"),
        (visit_arg(H, 2), "malformed peer record"),  # more records than sent
        (visit_arg(H, 1) + visit_arg("cd" * 20, 1), "malformed peer record"),
    ]
    for bad in ((1).to_bytes(2, "big") + rec_ok[2:], (2).to_bytes(2, "big") + rec_ok[2:]):
        # a roster bucket where k = 1 has no group record, or one past the buckets given
        with pytest.raises(redis.ResponseError, match="malformed peer record"):
            record(keys=fixed + [bucket], args=args[:2] + [visit_arg(H, 1)] + args[3:7] + [bad])
    for visits, error in bad_visits:
        with pytest.raises(redis.ResponseError, match=error):
            record(keys=fixed + [bucket], args=args[:2] + [visits] + args[3:7] + [rec_ok])
    with pytest.raises(redis.ResponseError, match="after the last visit"):  # more records than the visits have
        record(keys=fixed + [bucket], args=args[:2] + [visit_arg(H, 1)] + args[3:7] + [rec_ok + rec_ok])
    # where the torrent's marks are (ARGV[11], ARGV[12]): a visit's 12 bytes, its extra buckets
    one = visit_arg(H, 1)
    widths = (1).to_bytes(2, "big") + bytes([0, 1, 1]) + b"W" * 7  # bucket 1, width code 0, one extra an IP
    bad_widths = [
        (widths[:-1], b"\x00\x01", "12 bytes a visit"),
        (widths + widths, b"\x00\x01", "12 bytes a visit"),
        ((2).to_bytes(2, "big") + widths[2:], b"\x00\x01", "malformed widths"),  # a bucket not given
        (widths[:2] + bytes([7]) + widths[3:], b"\x00\x01", "malformed widths"),  # no width code 7
        (widths[:3] + bytes([2]) + widths[4:], b"\x00\x01", "malformed widths"),  # its own code not given
        (widths[:4] + bytes([8]) + widths[5:], b"\x00" * 16, "malformed widths"),  # more extras than widths
        (widths[:3] + bytes([7]) + widths[4:], b"\x00\x01", "malformed widths"),  # 3 codes given, 1 extra
        (widths, b"", "extra buckets of 0 bytes, not 2"),
        (widths, b"\x00\x01" * 2, "extra buckets of 4 bytes, not 2"),
        (widths, b"\x00\x02", "extra bucket out of range"),
        (b"", b"\x00\x01", "extra buckets without widths"),
    ]
    for w, extras, error in bad_widths:
        with pytest.raises(redis.ResponseError, match=error):
            record(keys=fixed + [bucket], args=args[:2] + [one] + args[3:7] + [rec_ok, "", b"", w, extras])
    assert client.get(bucket) is None and not client.exists(fixed[1])
    args[2], args[-1] = visit_arg(H, 1), rec_ok
    assert record(keys=fixed + [bucket], args=args) == [1]
    # with a width base and an extra bucket: the mark is found where it was made, nothing counts again
    assert record(keys=fixed + [bucket], args=args[:2] + [one] + args[3:7] + [rec_ok, "", b"", widths,
                                                                           b"\x00\x01"]) == [0]


# a visit's widths as record.lua reads them, each field on both sides of its bounds (the call has one bucket)
WIDTHS = st.builds(lambda b, code, mask, x, base: b.to_bytes(2, "big") + bytes([code, mask, x]) + base,
                   st.integers(0, 2), st.integers(0, 8), st.integers(0, 255), st.integers(0, 9),
                   st.binary(min_size=7, max_size=7))
EXTRAS = st.lists(st.integers(0, 2), max_size=10).map(lambda bs: b"".join(b.to_bytes(2, "big") for b in bs))


@st.composite
def well_formed(draw) -> tuple[bytes, bytes]:
    """Widths whose visit's code is among those given, with as many extra buckets an IP as other codes
    given (or one more), and those buckets (mostly the call's one)."""
    code, given = draw(st.integers(0, 6)), draw(st.integers(0, 127))
    given = (given | 1 << code) & 127
    x = bin(given).count("1") - 1 + draw(st.integers(0, 1))
    extras = b"".join(b.to_bytes(2, "big") for b in draw(st.lists(st.sampled_from([1, 1, 1, 0, 2]), min_size=x,
                                                                     max_size=x)))
    return (1).to_bytes(2, "big") + bytes([code, given, x]) + draw(st.binary(min_size=7, max_size=7)), extras


@settings_h(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.one_of(st.tuples(st.one_of(st.binary(max_size=40), WIDTHS), st.one_of(st.binary(max_size=40), EXTRAS)),
                       well_formed()),
       seen=st.booleans())
def test_any_widths_and_extra_buckets_are_refused_in_one_line_or_taken_whole(client, keys, settings, parts, seen):
    """record.lua's ARGV[11] and ARGV[12] of any bytes (past their 12 bytes a visit and 7 extra buckets an
    IP): a one-line error naming record.lua with nothing written, or a call that runs whole."""
    import redis

    widths, extras = parts
    record = scripts.register(client, "record", package="crawler.counters")
    shard = Recorder(client, keys, settings, object())._shards[0]
    fixed = shard.shared("2024-05") + shard.torrent_keys(H, "2024-05")
    bucket = keys.mark_bucket(1)
    rec_ok = bytes(2) + (1).to_bytes(2, "big") + bytes(2) + (1).to_bytes(2, "big") + bytes([1]) + b"A" * 8
    args = [T0, T0 - 30 * 86400, visit_arg(H, 1), "--", b"", (0).to_bytes(2, "big") + bytes(4), len(fixed), rec_ok,
            "", b"", widths, extras]
    try:
        if seen:  # a torrent already counted: its width records are read
            client.zadd(fixed[1], {H: 1})
        before = {k: client.dump(k) for k in fixed + [bucket]}
        try:
            got = record(keys=fixed + [bucket], args=args)
        except redis.ResponseError as e:
            assert str(e).startswith("record.lua: ") and "\n" not in str(e), str(e)
            assert {k: client.dump(k) for k in fixed + [bucket]} == before
        else:
            assert got in ([1], [0]) or got[0] == b"widths"
    finally:
        client.delete(*fixed, bucket)


def test_a_malformed_places_or_torrent_part_call_writes_nothing(client, keys, settings, tmp_path):
    """places.lua and record.lua's torrent part check their whole input before their first write."""
    import redis

    keys = Keys(keys.namespace, 2)
    rec = Recorder(client, keys, settings, geo.open_locator(places_db(tmp_path)))
    places = scripts.register(client, "places", package="crawler.counters")
    shard = rec._shards[1]
    bucket = shard.bucket(1)
    country, place = b"\x00\x04Land", (1).to_bytes(2, "big") + b"\x00\x00\x00\x00"  # no city, no postcode
    ok = (1).to_bytes(2, "big") + (1).to_bytes(2, "big") + bytes([1]) + b"C" * 8
    args = [T0, T0 - rec.window, "c", "2024-05", country, place, ok + ok[:9]]
    with pytest.raises(redis.ResponseError, match="places.lua: malformed peer record"):
        places(keys=shard.place_fixed + [bucket], args=args)
    for bad in (ok[:4] + bytes([2]) + ok[5:],  # m says city and postcode the place lacks
                (2).to_bytes(2, "big") + ok[2:]):  # a bucket it was not given
        with pytest.raises(redis.ResponseError, match="places.lua: malformed peer record"):
            places(keys=shard.place_fixed + [bucket], args=args[:-1] + [bad])
    with pytest.raises(redis.ResponseError, match="places.lua: bad"):
        places(keys=shard.place_fixed + [bucket], args=[T0, T0 - rec.window, "c", "May", country, place, ok])
    assert not client.exists(bucket, *shard.place_fixed)
    assert places(keys=shard.place_fixed + [bucket], args=args[:-1] + [ok]) == T0.to_bytes(4, "big")
    assert client.hgetall(shard.place_fixed[0]) == {b"countries.Land.users": b"1"}
    # the torrent part: a k the part cannot hold, then a truncated record
    record = scripts.register(client, "record", package="crawler.counters")
    fixed = rec._shards[0].shared("2024-05") + rec._shards[0].torrent_keys(H, "2024-05")
    tbucket = rec._shards[0].bucket(1)
    # k = 1, so no group record: no roster bucket
    users = bytes(2) + (1).to_bytes(2, "big") + bytes(4) + (1).to_bytes(2, "big") + bytes([1]) + b"A" * 8
    targs = [T0, T0 - rec.window, visit_arg(H, 1), "--", b"", (0).to_bytes(2, "big") + bytes(4), len(fixed), users,
             "T"]
    for visits, bad in ((visit_arg(H, 1), users[:10] + bytes([5]) + users[11:]), (visit_arg(H, 2), users + users[:12]),
                        (visit_arg(H, 1), (1).to_bytes(2, "big") + users[2:])):  # a roster bucket where k = 1
        with pytest.raises(redis.ResponseError, match="malformed peer record"):
            record(keys=fixed + [tbucket], args=targs[:2] + [visits] + targs[3:7] + [bad, "T"])
    with pytest.raises(redis.ResponseError, match="bad part"):
        record(keys=fixed + [tbucket], args=targs[:8] + ["X"])
    assert client.get(tbucket) is None and not client.exists(fixed[1])
    assert record(keys=fixed + [tbucket], args=targs) == [1]


def test_malformed_visited_and_sweep_calls_write_nothing(client, keys, settings, tmp_path):
    import redis

    visited = scripts.register(client, "visited", package="crawler.counters")
    sweep = scripts.register(client, "sweep", package="crawler.counters")
    hour, box = keys.processed(1), keys.outbox
    with pytest.raises(redis.ResponseError, match="visited.lua"):
        visited(keys=[hour, box], args=["soon", H])
    with pytest.raises(redis.ResponseError, match="visited.lua: bad info-hash at argument 3"):
        visited(keys=[hour, box], args=[7200, H, H[:39]])  # the good one before it is not written
    assert not client.exists(hour) and not client.exists(box)
    client.set(keys.mark_bucket(3), b"F" * 8 + (5).to_bytes(4, "big"))
    with pytest.raises(redis.ResponseError, match="sweep.lua"):
        sweep(keys=[keys.mark_bucket(3)], args=["later"])
    assert client.strlen(keys.mark_bucket(3)) == 12
    assert sweep(keys=[keys.mark_bucket(n) for n in range(2, 5)], args=[5]) == 1
    assert not client.exists(keys.mark_bucket(3))


@settings_h(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(widths=st.one_of(st.binary(max_size=20), st.builds(lambda b, base: b.to_bytes(2, "big") + base,
                                                          st.integers(0, 3), st.binary(min_size=7, max_size=7))),
       seen=st.booleans())
def test_any_probe_widths_are_refused_in_one_line_or_answered(client, keys, settings, widths, seen):
    """probe.lua's ARGV[5] of any bytes: a one-line error naming probe.lua, or the flags and the codes of the
    widths the torrent's marks are at (here none: the bucket holds no width record), counted or not."""
    import redis

    probe = scripts.register(client, "probe", package="crawler.counters")
    shard = Recorder(client, keys, settings, object())._shards[0]
    probes = (1).to_bytes(2, "big") + b"G" * 8
    try:
        if seen:
            client.zadd(shard.torrents, {H: 1})
        got = probe(keys=[shard.torrents, keys.mark_bucket(1)], args=[T0, H, probes, b"", widths])
    except redis.ResponseError as e:
        assert str(e) == "probe.lua: malformed widths"
    else:
        assert got == b"1\x00"
    finally:
        client.delete(shard.torrents)
    assert not client.exists(keys.mark_bucket(1))
