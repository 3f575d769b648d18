"""A batch's scrape seats under way, read as their requests end.

A runner's batch (``Asking.ask_batch``) takes every visit's seat in each of
its trackers' scrapes at once (most in requests asked ahead, already
answered); ``ScrapeSeats`` reads each seat as its request ends. As for the
announces (``workers.announcing``), ``wait(cut=True)`` returns once every
visit's seats are answered, or once half the visits' are and as long again
has passed (``announcing.Cut``): a visit whose scrape request was lost
goes on apart, not holding the batch for the retry. A seat still unanswered
at the deadline (and a second's guard) is its tracker's failure
(``NO_SCRAPE``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent

from crawler.sources.result import SourceResult
from crawler.sources.trackers.scrape_groups import Seat
from workers.announcing import Cut

# A tracker's failure when its scrape gave nothing by the visit's deadline.
NO_SCRAPE = "no scrape answer within the visit deadline"


class ScrapeSeats:
    """The seats of ``n`` visits: ``settled`` (each visit's answers known at once: a tracker backing
    off), ``seats`` (visit, URL, ``Seat``), until ``deadline`` (``time.monotonic()``); ``answer(url,
    seat)``: what an ended seat settles (a ``SourceResult``, or None: announce)."""

    def __init__(self, n: int, settled: list[dict[str, SourceResult | None]], seats: list[tuple[int, str, Seat]],
                 deadline: float, answer: Callable[[str, Seat], SourceResult | None]):
        self.answers, self.deadline, self.answer = settled, deadline, answer
        self.waiting = list(seats)
        self.seats: list[list[tuple[str, Seat]]] = [[] for _ in range(n)]  # each visit's (URL, seat)
        for i, u, seat in seats:
            self.seats[i].append((u, seat))
        self.left = [len(own) for own in self.seats]
        self.answered = {i for i in range(n) if not self.left[i]}

    def _take(self) -> None:
        """Read every seat whose request ended."""
        still = []
        for i, u, seat in self.waiting:
            if not seat.ready():
                still.append((i, u, seat))
                continue
            self.answers[i][u] = self.answer(u, seat)
            self._one(i)
        self.waiting = still

    def _one(self, i: int) -> None:
        self.left[i] -= 1
        if not self.left[i]:
            self.answered.add(i)

    def wait(self, cut: bool = False) -> set[int]:
        """The visits whose seats are all answered, once all are, or the deadline passed (the rest are then
        ``NO_SCRAPE``), or (``cut``) at the cut (module note)."""
        until = Cut(self.deadline, len(self.left), cut)
        while True:
            self._take()
            if not self.waiting:
                break
            left = until.until(len(self.answered)) - time.monotonic()
            if left <= 0:
                break
            gevent.wait([seat.event for *_, seat in self.waiting], timeout=left, count=1)
        if self.waiting and until.late():
            for i, u, _ in self.waiting:
                self.answers[i][u] = SourceResult.failed(u, NO_SCRAPE)
                self._one(i)
            self.waiting = []
        return set(self.answered)

    def of(self, i: int) -> tuple[dict[str, SourceResult], dict]:
        """Visit ``i``'s trackers whose scrape settles it, with their answers, and the counts the others'
        scrapes reported (URL -> ``ScrapeCounts``)."""
        got = self.answers[i]
        counts = {u: seat.counts() for u, seat in self.seats[i] if got.get(u) is None}
        return {u: r for u, r in got.items() if r is not None}, {u: c for u, c in counts.items() if c}
