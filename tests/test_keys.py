"""Key names: one home (crawler/keys/), a layout that cannot drift silently.

Data already in Redis stays readable after an upgrade only while every name
stays exactly as it was, so every key ``Keys`` builds is listed here with its
exact string and the form docs/redis.md gives it. A new key fails
``test_every_key_is_listed`` until it is added here and documented. And no
module of crawler/, workers/ or geo/ builds a key of its own: the source is
searched for the ways one could.
"""

from __future__ import annotations

import inspect
import re
import zlib
from pathlib import Path

import pytest

from crawler.keys import RESERVED, Keys

ROOT = Path(__file__).resolve().parent.parent
K = Keys("ns")
H = "ab" * 20

# name -> (the key Keys builds, its exact string for namespace "ns", its form in docs/redis.md)
LAYOUT = {
    "ready": (K.ready, "{ns}:ready", "`{ns}:ready`"),
    "ready_in": (K.ready_in("high"), "{ns}:ready:high", "`{ns}:ready:<lane>`"),
    "lane_members": (K.lane_members("low"), "{ns}:lane:low", "`{ns}:lane:<lane>`"),
    "lane_credit": (K.lane_credit, "{ns}:lanecredit", "`{ns}:lanecredit`"),
    "since": (K.since, "{ns}:since", "`{ns}:since`"),
    "cooling": (K.cooling, "{ns}:cooling", "`{ns}:cooling`"),
    "leases": (K.leases, "{ns}:leases", "`{ns}:leases`"),
    "evicted": (K.evicted, "{ns}:evicted", "`{ns}:evicted`"),
    "tombstones": (K.tombstones, "{ns}:tombstones", "`{ns}:tombstones`"),
    "held": (K.held, "{ns}:held", "`{ns}:held`"),
    "claims": (K.claims, "{ns}:claims", "`{ns}:claims`"),
    "expiries": (K.expiries, "{ns}:expiries", "`{ns}:expiries`"),
    "quarantined": (K.quarantined, "{ns}:quarantined", "`{ns}:quarantined`"),
    "quarantine": (K.quarantine, "{ns}:quarantine", "`{ns}:quarantine`"),
    "torrent": (K.torrent(H), "{ns}:t:" + H, "`{ns}:t:<h>`"),
    "trackers": (K.trackers(H), "{ns}:tr:" + H, "`{ns}:tr:<h>`"),
    "history": (K.history(H), "{ns}:vh:" + H, "`{ns}:vh:<h>`"),
    "visits": (K.visits, "{ns}:visits", "`{ns}:visits`"),
    "failed_visits": (K.failed_visits, "{ns}:failedvisits", "`{ns}:failedvisits`"),
    "discovery_minute": (K.discovery_minute(29_483_000), "{ns}:disc:29483000", "`{ns}:disc:<minute>`"),
    "rates": (K.rates, "{ns}:rates", "`{ns}:rates`"),
    "atrisk": (K.atrisk, "{ns}:atrisk", "`{ns}:atrisk`"),
    "workers": (K.workers, "{ns}:workers", "`{ns}:workers`"),
    "worker": (K.worker("host-1-2"), "{ns}:w:host-1-2", "`{ns}:w:<worker-id>`"),
    "tracker_health": (K.tracker_health, "{ns}:trackerhealth", "`{ns}:trackerhealth`"),
    "tracker_used": (K.tracker_used, "{ns}:trackerused", "`{ns}:trackerused`"),
    "tracker_rank": (K.tracker_rank, "{ns}:trackerrank", "`{ns}:trackerrank`"),
    "tracker_totals": (K.tracker_totals, "{ns}:trackertotals", "`{ns}:trackertotals`"),
    "announce_cap": (K.announce_cap, "{ns}:cap", "`{ns}:cap`"),
    "announce_cap_minute": (K.announce_cap_minute(29_483_000), "{ns}:capm:29483000", "`{ns}:capm:<minute>`"),
    "request_minute": (K.request_minute(29_483_000), "{ns}:reqm:29483000", "`{ns}:reqm:<minute>`"),
    "budget": (K.budget("metadata"), "{ns}:mdcap", "`{ns}:mdcap`"),
    "budget_minute": (K.budget_minute("dht", 29_483_000), "{ns}:dhtcapm:29483000", "`{ns}:dhtcapm:<minute>`"),
    "tracker_min_interval": (K.tracker_min_interval(H), "{ns}:mi:" + H, "`{ns}:mi:<h>`"),
    "mark_bucket": (K.mark_bucket(262143), "{ns}:mk:262143", "`{ns}:mk:<n>`"),
    "mark_buckets_match": (K.mark_buckets_match, "{ns}:mk:[0-9]*", "`{ns}:mk:<n>`"),
    "mark_bucket_prefix": (K.mark_bucket_prefix, "{ns}:mk:", "`{ns}:mk:<n>`"),
    "torrent_index_prefix": (K.torrent_index_prefix("all"), "{ns}:ix:all:countries:t:",
                             "`{ns}:ix:<all|YYYY-MM>:countries:t:<h>`"),
    "sweep_cursor": (K.sweep_cursor, "{ns}:mk:sweep", "`{ns}:mk:sweep`"),
    "index": (K.index("2026-11", ("cities", "c", "Germany")), "{ns}:ix:2026-11:cities:c:Germany",
              "`{ns}:ix:<all|YYYY-MM>:<family>[:c:<country>]`"),
    "total": (K.total("all", ("cities", "c", "Germany")), "{ns}:tx:all:cities:c:Germany",
              "`{ns}:tx:<all|YYYY-MM>:<family>[:c:<country>]`"),
    "rollup_outbox": (K.rollup_outbox, "{ns}:rx:outbox", "`{ns}:rx:outbox`"),
    "rollup_in_flight": (K.rollup_in_flight, "{ns}:rx:inflight", "`{ns}:rx:inflight`"),
    "rollup_seq": (K.rollup_seq, "{ns}:rx:seq", "`{ns}:rx:seq`"),
    "rollup_taken": (K.rollup_taken, "{ns}:rx:taken", "`{ns}:rx:taken`"),
    "rollup_applied": (K.rollup_applied, "{ns}:rx:applied", "`{ns}:rx:applied`"),
    "outbox": (K.outbox, "{ns}:sh:outbox", "`{ns}:sh:outbox`"),
    "outbox_in_flight": (K.outbox_in_flight, "{ns}:sh:inflight", "`{ns}:sh:inflight`"),
    "outbox_owner": (K.outbox_owner, "{ns}:sh:owner", "`{ns}:sh:owner`"),
    "processed": (K.processed(493_000), "{ns}:sh:processed:493000", "`{ns}:sh:processed:<hour>`"),
    "geo_errors": (K.geo_errors, "{ns}:geoerrors", "`{ns}:geoerrors`"),
    "announce_port": (K.announce_port, "{ns}:announceport", "`{ns}:announceport`"),
    "secret": (K.secret, "{ns}:secret", "`{ns}:secret`"),
    "layout": (K.layout, "{ns}:layout", "`{ns}:layout`"),
}
# Not keys: the hash tag, the namespace's SCAN pattern, and keys of tests and benchmarks.
NOT_KEYS = {"namespace", "rosters", "prefix", "name_key", "name_home_key", "match_all", "scratch", "shards", "tag", "shard", "all_shards", "for_torrent",
            "home", "counters", "counter_shards", "counter_shard", "all_counter_shards", "marks", "mark_buckets",
            "shard_mark_buckets", "by_shard"}


def test_the_layout_is_exactly_as_stored_data_expects():
    for name, (got, want, _) in LAYOUT.items():
        assert got == want, name
    assert K.index("all", ("torrents",)) == "{ns}:ix:all:torrents"
    assert K.index("all", ("countries", "t", H)) == "{ns}:ix:all:countries:t:" + H
    assert K.mark_bucket(0) == "{ns}:mk:0"
    assert K.prefix == "{ns}" and K.match_all == "{ns[}/]*"


def test_a_one_shard_crawl_is_the_single_redis_layout():
    assert K.shard(0) == K and K.for_torrent(H) == K and K.all_shards == (K,)
    assert K.shard(0).ready == "{ns}:ready"


def test_shards_have_their_own_tags_spread_over_the_slots():
    from redis.crc import key_slot

    for n in (2, 3, 6, 16):
        home = Keys("ns", n)
        slots = [key_slot(s.ready.encode()) for s in home.all_shards]
        # shard i's slot in the i-th of n equal parts: one master of an evenly
        # created cluster of m masters (m dividing n) holds n / m shards
        assert [s * n // 16384 for s in slots] == list(range(n))
        assert len({s.prefix for s in home.all_shards}) == n
        assert all(s.prefix.startswith("{ns/") for s in home.all_shards)
    home = Keys("ns", 1024)
    assert len({s.tag for s in home.all_shards}) == 1024
    assert home.for_torrent(H) == home.shard(int(H, 16) % 1024)


def test_an_ips_counter_shard_is_independent_of_its_mark_bucket():
    import random

    from crawler.keys import shard_of_fingerprint

    rng = random.Random(7)
    seen = set()
    for _ in range(20_000):
        f = rng.getrandbits(128)
        seen.add((shard_of_fingerprint(f, 4), (f >> 64) % 8))
    assert len(seen) == 32  # every (shard, bucket) pair occurs
    assert shard_of_fingerprint((5 << 104) | ((1 << 104) - 1), 1024) == 5


def test_a_place_index_has_its_total_in_one_shard():
    from crawler.counters.rollup import index_keys, member_key, outbox_field
    from crawler.keys import total_shard

    n = 7
    assert total_shard(("cities", "c", "Germany"), n) == zlib.crc32(b"cities:c:Germany") % n
    k = Keys("ns", n)
    assert index_keys(k, "all", ("cities", "c", "Germany")) == [
        k.shard(total_shard(("cities", "c", "Germany"), n)).total("all", ("cities", "c", "Germany"))]
    # a torrent's counters stay in its shard: no totals
    assert index_keys(k, "all", ("cities", "t", H)) == [k.shard(int(H, 16) % n).index("all", ("cities", "t", H))]
    assert index_keys(k, "all", ("torrents",)) == [k.shard(i).index("all", ("torrents",)) for i in range(n)]
    assert member_key(k, "all", ("torrents", "c", "X"), H) == k.shard(int(H, 16) % n).index("all", ("torrents", "c", "X"))
    assert outbox_field("2026-11", ("countries",), "Ice%2Eland") == b"\x00\x11" + b"2026-11:countries" + b"Ice%2Eland"
    assert Keys("ns", 3).shard(1).total("all", ("countries",)).endswith("}:tx:all:countries")


def test_home_keys_are_refused_on_a_shard():
    shard = Keys("ns", 4).shard(2)
    for name in ("workers", "tracker_health", "tracker_used", "tracker_rank", "tracker_totals", "geo_errors", "announce_port", "secret", "layout"):
        with pytest.raises(ValueError, match="home"):
            getattr(shard, name)
    with pytest.raises(ValueError, match="home"):
        shard.worker("w")
    assert shard.home.workers == "{ns}:workers"
    with pytest.raises(ValueError):
        Keys("ns", 0)
    with pytest.raises(ValueError):
        Keys("ns", 1025)
    with pytest.raises(ValueError):
        Keys("ns", 4).shard(4)


def test_the_namespace_pattern_matches_home_and_shards_only(client, namespace):
    ns = namespace
    home = Keys(ns, 3)
    others = [Keys(ns + "x").ready, Keys(ns + "x", 2).shard(1).ready]
    mine = [home.workers, *(s.ready for s in home.all_shards)]
    try:
        for k in mine + others:
            client.set(k, 1)
        found = set(client.scan_iter(match=home.match_all, count=1000))
        assert found == {k.encode() for k in mine}
    finally:
        client.delete(*mine, *others)


def test_every_key_is_listed_documented_and_reserved():
    public = {n for n in dir(Keys) if not n.startswith("_")}
    assert public - NOT_KEYS == set(LAYOUT), "a key of Keys is missing from LAYOUT (or LAYOUT names a gone one)"
    doc = (ROOT / "docs" / "redis.md").read_text()
    for name, (got, _, form) in LAYOUT.items():
        assert form in doc, f"docs/redis.md does not describe {name} as {form}"
        assert got.split(":")[1] in RESERVED, name
        member = inspect.getattr_static(Keys, name)
        assert (member.fget if isinstance(member, property) else member).__doc__, f"Keys.{name} has no docstring"


def test_scratch_keys_never_collide_with_peercrawls():
    assert K.scratch("bq") == "{ns}:bq" and K.scratch("bm", "x", "1.2.3.4") == "{ns}:bm:x:1.2.3.4"
    for first in ("mk", "sh", "ready", "t"):
        with pytest.raises(ValueError, match="collide"):
            K.scratch(first, "x")
    with pytest.raises(ValueError):
        K.scratch()


# Ways a module could build a key name of its own (the keys package's name_key is the only one).
FORBIDDEN = [
    (re.compile(r"""["']\{["']\s*\+"""), 'a "{" + ... hash tag'),
    (re.compile(r"""\+\s*["']\}"""), 'a ... + "}" hash tag'),
    (re.compile(r"\{\{\{[^}]*\}\}\}"), "an f-string or format hash tag"),
    (re.compile(r"""["']\{%s\}"""), "a %-format hash tag"),
    (re.compile(r"""["']:["']\.join\("""), 'a ":".join'),
    (re.compile(r"\.name_(?:home_)?key\("), "Keys.name_key"),
    (re.compile(r"\bkeys\.prefix\b"), "Keys.prefix"),
    (re.compile(r"\bkeys\.sub\("), "Keys.sub"),
    (re.compile(r"\.scratch\("), "a scratch key (tests and benchmarks only)"),
    (re.compile(r"""["'](?:""" + "|".join(sorted(RESERVED)) + r"""):"""), "a literal key segment"),
]


def key_building(text: str) -> list[tuple[int, str]]:
    """(line number, what) of every line of ``text`` that looks like it builds a key."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
        for pattern, what in FORBIDDEN:
            if pattern.search(code):
                found.append((n, what))
    return found


def test_the_detector_finds_each_way_of_building_a_key():
    planted = [
        'key = "{" + settings.namespace + "}:sh:outbox"',
        "key = prefix + '}:x'",
        'key = f"{{{ns}}}:mk:{n}"',
        'key = "{%s}:ready" % ns',
        'key = ":".join((keys.prefix, "ix", period))',
        'key = keys.name_key("sh", "inflight")',
        'key = self.keys.prefix + ":mk:sweep"',
        'key = keys.sub("sh", "outbox")',
        'key = keys.scratch("mk2")',
        'client.hlen(ns_tag + "sh:inflight")',
    ]
    for line in planted:
        assert key_building(line), line
    assert not key_building('key = self.keys.outbox\nname = re.sub("x", "y", s)  # {ns}:sh:outbox\n'
                            'SECRET = re.compile(rf"[a-z]{{{LEN},}}")')


def test_no_module_builds_a_key_outside_keys_py():
    offenders = []
    for top in ("crawler", "workers", "geo"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.parent == ROOT / "crawler" / "keys":
                continue
            for n, what in key_building(path.read_text()):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {what}")
    assert not offenders, "key names are built only in crawler/keys/:\n" + "\n".join(offenders)
    assert not hasattr(Keys, "sub")


def test_no_lua_script_builds_a_key():
    """Every key reaches a script through KEYS (Redis Cluster routes by them)."""
    scripts = sorted(ROOT.glob("crawler/**/*.lua"))
    assert len(scripts) >= 10
    for path in scripts:
        code = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        assert not re.search(r"KEYS\[[^\]]*\]\s*\.\.|\.\.\s*KEYS\[|'\{|\"\{", code), path


def test_the_recorder_builds_bucket_keys_as_keys_names_them():
    from crawler.counters.shard_keys import ShardKeys, bucket_keys

    # a name with a % in it (the settings allow none) is still its own, not a format
    for k in (K, Keys("ns", shards=4, counters=2).counter_shard(1), Keys("a%d%%s")):
        sk = ShardKeys(k)
        assert [sk.bucket(n) for n in (0, 7, 262143, 7)] == [k.mark_bucket(n).encode() for n in (0, 7, 262143, 7)]
        numbered = {262143: 1, 0: 2, 7: 3}  # a call's bucket numbers, in the order it met them
        assert bucket_keys(numbered, sk) == [k.mark_bucket(n).encode() for n in (262143, 0, 7)]


def test_the_recorder_builds_a_torrents_index_keys_as_keys_names_them():
    from crawler.counters.shard_keys import ShardKeys

    for k in (K, Keys("ns", shards=4, counters=2).counter_shard(1), Keys("a%d%%s")):
        sk = ShardKeys(k)
        for month in ("2026-11", "2026-12", "2026-11"):  # a new month's prefixes, then the old one's again
            assert sk.torrent_keys(H, month) == [k.index(period, ("countries", "t", H)).encode()
                                                 for period in ("all", month)]
