"""A visit's stage times: each lap measured, the process's histograms read back within a bucket."""

from __future__ import annotations

import time

from hypothesis import example, given
from hypothesis import strategies as st

from workers.visit_stages import SLOT, STAGES, Laps, StageTimes, bucket


def test_laps_measure_each_stage_from_the_last():
    laps = Laps(waited=0.25)
    time.sleep(0.02)
    laps.lap("plan")
    laps.lap("scrape")
    assert laps.times["wait"] == 0.25
    assert 0.02 <= laps.times["plan"] < 1.0
    assert laps.times["scrape"] < laps.times["plan"]


def test_summary_gives_each_reached_stage_within_a_bucket():
    st = StageTimes()
    for ms in range(1, 101):  # record: 1..100 ms; plan: 0.2 ms; nothing else reached
        laps = Laps()
        laps.times.update(plan=0.0002, record=ms / 1000)
        st.add(laps.whole())
    out = st.summary()
    assert set(out) == {"wait", "plan", "record", SLOT} and set(out) - {SLOT} <= set(STAGES)
    assert out["record"]["visits"] == 100
    assert abs(out["record"]["p50_ms"] - 50) <= 50 * 0.09
    assert abs(out["record"]["p99_ms"] - 99) <= 99 * 0.09
    assert out["record"]["mean_ms"] == 50.5
    assert abs(out["plan"]["p50_ms"] - 0.2) <= 0.2 * 0.09
    # a stage under a microsecond is in the first bucket, not lost
    assert out["wait"]["visits"] == 100 and out["wait"]["p99_ms"] < 0.002


def test_slot_is_each_visits_whole_time_not_a_sum_of_medians():
    st = StageTimes()
    # half the visits wait long and record fast, half the other way round: each stage's median is
    # ~1 ms, every visit's whole time 41 ms
    for i in range(100):
        laps = Laps(waited=0.040 if i % 2 else 0.001)
        laps.times["record"] = 0.001 if i % 2 else 0.040
        st.add(laps.whole())
    out = st.summary()
    assert out[SLOT]["visits"] == 100
    assert abs(out[SLOT]["p50_ms"] - 41) <= 41 * 0.09 and abs(out[SLOT]["p99_ms"] - 41) <= 41 * 0.09
    assert out[SLOT]["mean_ms"] == 41.0
    assert out["record"]["mean_ms"] == out["wait"]["mean_ms"] == 20.5


@given(st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
@example(1e-6)
@example(2 ** (13 / 8) / 1e6)  # bucket edges
@example(2 ** (101 / 8) / 1e6)
def test_a_time_is_counted_in_the_bucket_the_figures_read(seconds):
    st_ = StageTimes()
    st_.add({"plan": seconds})
    assert st_.histograms["plan"] == {bucket(seconds): 1}
