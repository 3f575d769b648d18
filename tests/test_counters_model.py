"""The recorder against a model of §4's dedupe, over random histories (hypothesis).

The model is the seed's algorithm without its races: a dict of (metric, IP) ->
time of the mark; a pair counts when its mark is missing or older than the
window. Random histories mix torrents, places that change between visits
(a GeoIP update), unmapped and country-only places, gaps around the 30-day
window and batches small enough to split visits, so they exercise the mark
records, their renewal and the group records that let a revisit skip a
known peer's marks (record.lua). Every counter (every index it lives in,
lifetime and month), the outbox and each visit's ``new`` must equal the model's.
"""

from __future__ import annotations

import calendar
import ipaddress
import uuid
from collections import Counter

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler.counters import DEFAULT_BATCH_PAIRS, Recorder, metrics_for, month_of
from crawler.counters.names import LIFETIME
from crawler.counters.rankings import index_count
from crawler.keys import Keys
from geo import Place
from tests.namespaces import delete_namespace
from tests.recorder_one_visit import record_places

T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))
DAY = 86400
WINDOW = 30 * DAY
TORRENTS = ["ab" * 20, "cd" * 20]
IPS = [ipaddress.ip_address(a).packed for a in ("1.1.1.1", "1.1.1.2", "2.2.2.2", "2001:db8::7", "5.5.5.5")]
PLACES = [
    Place(),
    Place("Germany"),
    Place("Germany", "Berlin", "10115"),
    Place("Germany", "Berlin", "10117"),
    Place("Germany", "München", None),
    Place("Germany", None, "80331"),
    Place("United States", "St. Louis", "63101"),
]

visit = st.tuples(
    st.sampled_from(TORRENTS),
    st.sampled_from([0, 1, DAY, 10 * DAY, 20 * DAY, WINDOW - 1, WINDOW, WINDOW + 1]),  # gap before it
    # mostly a stable place per IP (as GeoIP gives), sometimes another
    st.dictionaries(st.sampled_from(range(len(IPS))),
                    st.sampled_from([2, 2, 2, 6, 6, 1, 0, 3, 4, 5]), max_size=len(IPS)),
)


class Model:
    """The counters as contract §4 defines them, in plain Python: what Redis must agree with."""
    def __init__(self):
        self.marks: dict = {}
        self.lifetime: Counter = Counter()
        self.months: Counter = Counter()
        self.outbox: Counter = Counter()

    def visit(self, h, located, now) -> int:
        new = 0
        for packed, place in located:
            for i, m in enumerate(metrics_for(h, place.country, place.city, place.postcode)):
                t = self.marks.get((m.name, packed))
                if t is None or t <= now - WINDOW:
                    self.marks[(m.name, packed)] = now
                    self.lifetime[m] += 1
                    self.months[(m, month_of(now))] += 1
                    if m.family in ("countries", "torrents"):
                        self.outbox[m.name] += 1
                    new += i == 0
        return new


def assert_counters_equal(client, keys: Keys, model: Model) -> None:
    """Every counter, in every index it lives in, lifetime and month, equals the model's."""
    for m, n in model.lifetime.items():
        for scope, member in m.indexes:
            assert index_count(client, keys, LIFETIME, scope, member) == n, (m.name, scope)
    for (m, month), n in model.months.items():
        for scope, member in m.indexes:
            assert index_count(client, keys, month, scope, member) == n, (m.name, month, scope)


@hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(visit, min_size=1, max_size=16), batch_pairs=st.sampled_from([8, 13, 800]),
       buckets=st.sampled_from([1, 3, 64]))
def test_counts_equal_the_model(client, namespace, settings, history, batch_pairs, buckets):
    keys = Keys(f"{namespace}-{uuid.uuid4().hex[:8]}")  # fresh per example; under the test namespace
    try:
        s = settings.replace(namespace=keys.namespace, stathat_ezkey="k", stathat_families=("countries", "torrents"))
        rec = Recorder(client, keys, s, object(), mark_buckets=buckets, batch_pairs=batch_pairs)
        model = Model()
        now = T0
        for h, gap, chosen in history:
            now += gap
            located = [(IPS[i], PLACES[p]) for i, p in sorted(chosen.items())]
            assert record_places(rec, h, located, now) == model.visit(h, located, now)
        assert_counters_equal(client, keys, model)
        box = {k.decode(): int(v) for k, v in client.hgetall(keys.outbox).items()}
        assert box == dict(model.outbox)
    finally:
        delete_namespace(client, keys.namespace)


def test_a_group_record_expires_with_its_oldest_mark(client, keys, settings):
    """A peer known on torrent A joins torrent B 20 days later: its global place
    marks are 20 days old, so B's group record must expire with them, and a
    visit of B 11 days later counts the place again (found by the model test
    when the group took the visit's time instead of its oldest mark's)."""
    rec = Recorder(client, keys, settings, object(), mark_buckets=1)
    ip, berlin = IPS[0], PLACES[2]
    assert record_places(rec, TORRENTS[0], [(ip, berlin)], T0) == 1
    assert record_places(rec, TORRENTS[1], [(ip, berlin)], T0 + 20 * DAY) == 1
    m = metrics_for(TORRENTS[1], "Germany", "Berlin", "10115")[1]  # countries.Germany.users
    scope, member = m.indexes[0]
    assert client.zscore(keys.index(LIFETIME, scope), member) == 1
    assert record_places(rec, TORRENTS[1], [(ip, berlin)], T0 + 31 * DAY) == 0
    assert client.zscore(keys.index(LIFETIME, scope), member) == 2


TORRENT_POOL = ["ab" * 20, "cd" * 20, "ef" * 20, "0123456789" * 4]
batch_visit = st.tuples(
    st.sampled_from([0, 1, DAY, 20 * DAY, WINDOW, WINDOW + 1]),  # gap before the batch
    # distinct torrents, each with its IPs and their places: one IP often in
    # several visits of a batch, sometimes at another place (a GeoIP update)
    st.dictionaries(st.sampled_from(TORRENT_POOL),
                    st.dictionaries(st.sampled_from(range(len(IPS))), st.sampled_from([2, 2, 6, 1, 0, 3, 4]),
                                    max_size=len(IPS)),
                    min_size=1, max_size=len(TORRENT_POOL)),
)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(batch_visit, min_size=1, max_size=8), batch_pairs=st.sampled_from([8, 13, 800]),
       shards=st.sampled_from([1, 3]), unprobed=st.sets(st.sampled_from(TORRENT_POOL)))
def test_visits_recorded_together_count_as_one_after_the_other(client, namespace, settings, history, batch_pairs,
                                                              shards, unprobed):
    """``record_places_many``: a batch of visits at one time counts as if each was
    recorded after the previous one, on one shard and on several (where an IP and
    place met in several visits of a batch go in one place call, and an IP met at
    two places in two), whether a visit is probed first or not (``unprobed``'s
    torrents are recorded without a probe)."""
    keys = Keys(f"{namespace}-{uuid.uuid4().hex[:8]}", shards)
    try:
        s = settings.replace(namespace=keys.namespace, stathat_ezkey="k", stathat_families=("countries", "torrents"))
        rec = Recorder(client, keys, s, object(), mark_buckets=3 * shards, batch_pairs=batch_pairs)
        model = Model()
        now = T0
        for gap, visits in history:
            now += gap
            batch = [(h, [(IPS[i], PLACES[p]) for i, p in sorted(chosen.items())]) for h, chosen in visits.items()]
            probes = [h not in unprobed for h, _ in batch]
            assert rec.record_places_many(batch, now, probes) == [model.visit(h, located, now) for h, located in batch]
        assert_counters_equal(client, keys, model)
    finally:
        delete_namespace(client, keys.namespace)


# Swarms of a torrent drawn from one pool of addresses, at sizes on both sides of the roster's widths
# (a bucket per ~16 IPs: 1, 4 and 16 buckets): each IP keeps its place.
WIDE_POOL = [bytes([3, 3, k // 250, k % 250 + 1]) for k in range(90)]
wide_visit = st.tuples(
    st.sampled_from(TORRENTS),
    st.sampled_from([0, 1, DAY, 20 * DAY, WINDOW - 1, WINDOW + 1]),  # gap before it
    st.sampled_from([1, 9, 16, 17, 40, 64, 65, 90]),  # its size
    st.integers(0, len(WIDE_POOL) - 1),  # where in the pool it starts (wrapping round)
    st.booleans(),  # probed first
)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(wide_visit, min_size=2, max_size=10), buckets=st.sampled_from([3, 64, 4096]),
       shards=st.sampled_from([1, 2]), rosters=st.booleans(), batch_pairs=st.sampled_from([13, DEFAULT_BATCH_PAIRS]))
def test_counts_equal_the_model_as_swarms_cross_roster_widths(client, namespace, settings, history, buckets, shards,
                                                              rosters, batch_pairs):
    """A torrent's marks stay at the width of the visit that made them: a visit at another width (the
    swarm grew or shrank past a width, probed or not) finds them there and counts nothing twice, in a
    crawl of rosters from its start and in one that may hold marks by (IP, torrent) too."""
    keys = Keys(f"{namespace}-{uuid.uuid4().hex[:8]}", shards, rosters=rosters)
    try:
        s = settings.replace(namespace=keys.namespace, stathat_ezkey="k", stathat_families=("countries", "torrents"))
        rec = Recorder(client, keys, s, object(), mark_buckets=buckets * shards, batch_pairs=batch_pairs)
        model = Model()
        now = T0
        for h, gap, size, start, probed in history:
            now += gap
            picked = [(start + j) % len(WIDE_POOL) for j in range(size)]
            located = [(WIDE_POOL[k], PLACES[2 + k % 5]) for k in picked]
            assert rec.record_places_many([(h, located)], now, [probed]) == [model.visit(h, located, now)]
        assert_counters_equal(client, keys, model)
        if shards == 1:  # several shards' outboxes add up in the rollup (test_counters_shards.py)
            box = {k.decode(): int(v) for k, v in client.hgetall(keys.outbox).items()}
            assert box == dict(model.outbox)
    finally:
        delete_namespace(client, keys.namespace)
