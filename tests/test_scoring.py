"""contract §2 as pure functions, and the same rule applied by Redis (complete.lua)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.queue.queue import Queue
from crawler.queue.scoring import Outcome, SourceCount, multiplier, outcome
from crawler.queue.view import QueueView
from crawler.settings import Settings
from crawler.torrents.items import NewItem

S = Settings()


def next_score(score: float, o: Outcome, settings: Settings) -> tuple[float, bool]:
    """The model of contract §2's rule: the score after a visit and whether it is evicted by score.

    Scores only: staged eviction's graces and pins are complete.lua's, and
    the settings these tests use leave them out.
    """
    new = score * multiplier(o, settings)
    return new, new < settings.evict_below


def test_no_peers_halves():
    assert outcome(0, 0, [SourceCount(0, 200)]) is Outcome.NONE
    assert next_score(1.0, Outcome.NONE, S) == (0.5, False)


def test_some_peers_is_point_eight():
    assert outcome(10, 10, [SourceCount(10, 200)]) is Outcome.SOME
    assert next_score(1.0, Outcome.SOME, S)[0] == pytest.approx(0.8)


def test_full_and_enough_new_is_one_point_two():
    # ceil(0.05 * 200) = 10 new peers needed
    assert outcome(200, 10, [SourceCount(200, 200)]) is Outcome.FULL
    assert outcome(200, 9, [SourceCount(200, 200)]) is Outcome.SOME
    assert next_score(1.0, Outcome.FULL, S)[0] == pytest.approx(1.2)


def test_fraction_rounds_up_against_that_sources_max():
    # max 50 -> ceil(2.5) = 3 new needed; the DHT (max 100) is not full
    srcs = [SourceCount(50, 50), SourceCount(40, 100)]
    assert outcome(60, 3, srcs) is Outcome.FULL
    assert outcome(60, 2, srcs) is Outcome.SOME


def test_full_without_new_is_some():
    assert outcome(200, 0, [SourceCount(200, 200)]) is Outcome.SOME


def test_eviction_boundaries():
    s = 1.0
    for n in range(1, 9):
        s, ev = next_score(s, Outcome.NONE, S)
        assert ev == (n == 8), n  # 0.5**7 stays, 0.5**8 = 0.0039 goes
    s = 1.0
    for n in range(1, 25):
        s, ev = next_score(s, Outcome.SOME, S)
        assert ev == (n == 24), n  # 0.8**23 = 0.0059 stays, 0.8**24 = 0.0047 goes
    assert 0.8**23 > 0.005 > 0.8**24 and 0.5**7 > 0.005 > 0.5**8


@given(
    found=st.integers(0, 1000),
    new=st.integers(0, 1000),
    srcs=st.lists(st.tuples(st.integers(0, 500), st.integers(1, 500)), max_size=5),
)
def test_outcome_matches_the_rule(found, new, srcs):
    sc = [SourceCount(r, m) for r, m in srcs]
    got = outcome(found, new, sc)
    if found == 0:
        assert got is Outcome.NONE
    elif any(r >= m and new >= math.ceil(0.05 * m) for r, m in srcs):
        assert got is Outcome.FULL
    else:
        assert got is Outcome.SOME


@pytest.mark.parametrize("sequence", [
    [Outcome.NONE] * 8,
    [Outcome.SOME] * 24,
    [Outcome.FULL, Outcome.NONE, Outcome.SOME, Outcome.FULL, Outcome.NONE, Outcome.NONE],
])
def test_redis_applies_the_same_scores(client, keys, settings, sequence):
    """complete.lua's multiplication and threshold agree with next_score, visit by visit."""
    q = Queue(client, keys, settings)
    view = QueueView(q.client, q.keys)
    h = "c" * 40
    q.add([NewItem(h)], now=1000.0)
    expected, now = 1.0, 1000.0
    for n, o in enumerate(sequence):
        now += 10
        (lease,) = q.claim(1, now=now)
        assert lease.score == pytest.approx(expected)
        expected, evicted = next_score(expected, o, settings)
        state, score = q.complete(lease, o, now=now, due=now)
        assert score == pytest.approx(expected, rel=1e-12)
        assert state == ("evicted" if evicted else "cooling")
        if evicted:
            assert n == len(sequence) - 1
            assert view.state(h, now)[0] == "evicted"
            assert q.claim(1, now=now + 1) == []
            return
    assert view.state(h, now + 1)[0] == "ready"
