"""ShardTops, the per-process estimate of what each queue shard offers next: pure, no Redis."""

from __future__ import annotations

from crawler.queue.shard_tops import ShardTops


def test_a_few_shards_are_all_peeked_once_their_estimates_are_old():
    t = ShardTops(3, max_age=1.0)
    assert t.stale(100.0) == [0, 1, 2]
    for i in range(3):
        t.note(i, b"0.5", 100.0)
    assert t.stale(100.5) == []
    t.note(1, b"0.7", 100.6)  # a claim's reply refreshes its shard
    assert t.stale(101.1) == [0, 2]


def test_a_peek_reads_at_most_peek_max_shards_the_oldest_first_then_waits_a_round():
    t = ShardTops(10, max_age=1.0, peek_max=4)
    assert t.stale(100.0) == [0, 1, 2, 3]
    for i in (0, 1, 2, 3):
        t.note(i, b"0.5", 100.0)
    assert t.stale(100.1) == []  # six left unread: they wait for the next round
    assert t.stale(101.0) == [4, 5, 6, 7]
    for i in (4, 5, 6, 7):
        t.note(i, b"0.5", 101.0)
    t.note(8, b"0.9", 101.5)  # refreshed by a claim there
    assert t.stale(102.0) == [9, 0, 1, 2]  # never read, then the oldest estimates
    assert t.choose(102.0) == 9  # unknown counts as best until read


def test_at_the_largest_shard_count_a_process_peeks_at_most_peek_max_shards_a_round():
    t = ShardTops(1024)
    seen, now = set(), 0.0
    for _ in range(16):
        got = t.stale(now)
        assert len(got) == t.peek_max == 64
        seen.update(got)
        for i in got:
            t.note(i, b"1", now)
        assert t.stale(now + 0.5) == []
        now += 1.0
    assert seen == set(range(1024))  # every shard read within 16 rounds
