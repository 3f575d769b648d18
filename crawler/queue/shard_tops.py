"""Which queue shard a claim goes to, so claims take high scores first overall (contract §1, §9).

A sharded queue has no global top: each shard's ``ready`` set is ordered on
its own. A claimer could ask every shard before each claim (one more round
trip per claim, and every claim reading every shard) or pick shards at
random (the best torrent of the crawl waits while lower ones are claimed).
Instead each process keeps an estimate of what every shard offers next and
claims from the best one:

- every claim's reply ends with what its shard offers after it
  (``claim.lua``: its best ready score, ``due``, or empty until a time), so
  the shard a process claims from is always known, at no extra cost;
- an estimate older than ``max_age`` seconds is asked again: the queue runs
  each stale shard's housekeeping (``claim.lua`` claiming nothing, which
  moves due torrents into ``ready`` where their scores show) and reads the
  offer it returns, the stale shards in one pipelined round trip (at most
  one per ``max_age`` per process), at most ``peek_max`` of them, the
  oldest first: a peek costs Redis ~20 µs a shard, so a process claiming
  from 1,024 shards would spend ~2 % of a Redis core on peeks alone
  (``bench/bench_shard_peeks.py``), and a hundred such processes would
  fill one Redis. Past ``peek_max`` shards an estimate not refreshed by a
  claim is up to ``max_age × shards / peek_max`` seconds old;
- a shard whose due torrents wait beyond one call's housekeeping budget
  holds scores nobody has compared yet: it counts as best, so the next claim
  there moves them into ``ready`` (its reply then says what they were worth);
- an empty shard is skipped until its first due time;
- what the process itself puts back (an add, a release, a completion or a
  deferral) updates its shard's estimate at once (``arrived``).

Estimates go stale in two ways. Other processes claiming lower a shard's
top: the estimate is then too high, the claim there gets less than hoped,
and its reply corrects it. New or due torrents raise it: caught by the due
times and by ``max_age``. So a claim's score falls short of the global best
only by what arrived or was taken within the last ``max_age`` seconds;
``bench/bench_shard_claims.py`` measures how far under load.
"""

from __future__ import annotations

import random

INF = float("inf")
# Seconds an estimate is trusted: one pipelined peek per process this often.
MAX_AGE = 1.0
# Shards one peek reads at most (the oldest estimates first).
PEEK_MAX = 64


class ShardTops:
    """What each of ``shards`` queue shards offers next, as one process last saw it."""

    def __init__(self, shards: int, max_age: float = MAX_AGE, rng: random.Random | None = None,
                 peek_max: int = PEEK_MAX):
        self.shards = shards
        self.max_age = max_age
        self.peek_max = peek_max
        self._next_peek = -INF  # a peek left stale shards unread: the next waits until then
        self._rng = rng or random.Random()
        self._top = [INF] * shards  # best claimable score (INF: due torrents of unknown score)
        self._until = [0.0] * shards  # empty shards: time something falls due
        self._seen = [-INF] * shards  # when the estimate was made
        self._oldest = -INF  # at most min(_seen): most claims need not look at every shard

    def stale(self, now: float) -> list[int]:
        """The shards whose estimate must be read again before choosing: at most ``peek_max``,
        the oldest first, and after a peek that left some unread, none for ``max_age``."""
        if now - self._oldest <= self.max_age or now < self._next_peek:
            return []
        self._oldest = min(self._seen)
        old = [i for i in range(self.shards) if now - self._seen[i] > self.max_age]
        if len(old) > self.peek_max:
            old.sort(key=self._seen.__getitem__)
            del old[self.peek_max :]
            self._next_peek = now + self.max_age
        return old

    def note(self, i: int, offer: bytes | str | None, now: float) -> None:
        """Record what shard ``i`` offers next: a score, ``due``, ``e<time>`` or ``e`` (claim.lua's last
        element), or None when unknown."""
        if isinstance(offer, bytes):
            offer = offer.decode()
        self._seen[i] = now
        self._until[i] = 0.0
        if offer is None or offer == "due":
            self._top[i] = INF
        elif offer.startswith("e"):
            self._top[i] = -INF
            self._until[i] = float(offer[1:]) if len(offer) > 1 else INF
        else:
            self._top[i] = float(offer)

    def arrived(self, i: int, at: float, now: float, score: float | None = None) -> None:
        """A torrent becomes claimable in shard ``i`` at ``at`` with (held) score ``score`` (None: unknown)."""
        if at <= now and score is not None:
            if self._top[i] == -INF or score > self._top[i]:
                self._top[i], self._until[i] = score, 0.0
        elif self._top[i] == -INF:
            self._until[i] = min(self._until[i], at)

    def choose(self, now: float, exclude: frozenset[int] | set[int] = frozenset()) -> int | None:
        """The shard to claim from: the best estimate (ties at random); None if every shard is empty."""
        best, picks = -INF, []
        for i in range(self.shards):
            if i in exclude:
                continue
            top = self._top[i]
            if top == -INF:
                if self._until[i] > now:
                    continue
                top = INF  # its first torrent fell due since
            if top > best:
                best, picks = top, [i]
            elif top == best:
                picks.append(i)
        if not picks:
            return None
        return picks[0] if len(picks) == 1 else self._rng.choice(picks)
