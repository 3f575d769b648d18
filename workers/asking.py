"""A batch's sources asked at once, under one deadline: scrapes first, then announces and the DHT.

``Asking.ask_batch(asks, laps, cut)`` is the asking stage of a runner's
batch (``Visitor.visit_many``): every tracker of each visit is scraped at
once (most often a seat in a scrape asked ahead, ``workers.scrape_ahead``);
those that report the swarm empty, or fail, are settled without an
announce. Of the others, a tracker learned to list the same peers as one
asked before it (``crawler.sources.trackers.tracker_mirrors``), its scrape
of this torrent agreeing, is not announced to; should the tracker asked in
its place fail, it is asked after all. The rest wait for their places in
the announce cap, the DHT (when due) for its budget's; the deadline starts
after the longest wait. Every source bounds itself; a source that raised or
gave nothing by the deadline is that source's failure, never the visit's.
Raises only ``StoreError``.

The seats are read as their requests end (``workers.scrape_seats``), a
tracker's announces of the batch go out in one ``Trackers.announce_many``
and each DHT lookup in a greenlet of its own (``workers.announcing``); with
``cut``, the visits not answered at a cut are left out, to be waited for
apart. Each visit's answers are what it would have had alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from crawler import redact
from crawler.errors import StoreError
from crawler.sources.rate_budget import RateBudget
from crawler.sources.result import SourceResult
from crawler.sources.trackers.tracker_mirrors import Mirrors
from workers.announcing import Announcing
from workers.scrape_seats import ScrapeSeats

T = TypeVar("T")


class Asking:
    """The asking stage of one worker process's visits (shared by its greenlets).

    ``trackers``: its ``Trackers``; ``dht``: its ``DhtSource`` or None;
    ``ahead``: its ``ScrapeAhead``; ``cap`` and ``dht_budget``: the
    namespace's announce cap and DHT budget (``RateBudget``); ``mirrors``:
    the trackers learned to list the same peers.
    A visit's answers in a batch (module note) are what it would have had
    alone.
    """

    def __init__(self, settings, trackers, dht, ahead, cap: RateBudget, dht_budget: RateBudget):
        self.settings, self.trackers, self.dht, self.ahead = settings, trackers, dht, ahead
        self.cap, self.dht_budget = cap, dht_budget
        self.mirrors = Mirrors(settings.tracker_cache_size, frozenset(settings.tracker_rates()))

    def ask_batch(self, asks: list[tuple[str, list[str], bool]], laps=None, cut: bool = True
                  ) -> tuple[list, Callable[[], list] | None]:
        """Each of ``asks`` (info-hash, URLs, DHT due) asked, together (module note): its answers and the
        trackers a mirror stood in for (URL -> the URL asked in its place), which were not asked; with
        ``cut``, the visits not answered at a cut (the scrapes' or the announces': ``workers.scrape_seats``,
        ``workers.announcing``) are None, and ``rest()`` (None: none left) waits for them and gives theirs
        in order. ``laps``: the batch's ``workers.visit_stages.Laps``, told when the scrape stage ends."""
        seats = self.scrape_seats([(h, urls) for h, urls, _ in asks])
        scraped = seats.wait(cut)
        if laps is not None:
            laps.lap("scrape")
        first = sorted(scraped)
        out: list = [None] * len(asks)
        got, later = self._announce_stage([asks[i] for i in first], [seats.of(i) for i in first], cut)
        for i, answer in zip(first, got):
            out[i] = answer
        pending = [i for i, answer in enumerate(out) if answer is None]
        if not pending:
            return out, None

        def rest() -> list:
            late = dict(zip([i for i, answer in zip(first, got) if answer is None], later() if later else []))
            unscraped = [i for i in range(len(asks)) if i not in scraped]
            if unscraped:
                seats.wait()
                late.update(zip(unscraped, self._announce_stage([asks[i] for i in unscraped],
                                                                [seats.of(i) for i in unscraped], False)[0]))
            return [late[i] for i in pending]

        return out, rest

    def _announce_stage(self, asks: list, scraped: list, cut: bool) -> tuple[list, Callable[[], list] | None]:
        """The announce stage of visits whose scrapes are in (``scraped``: ``ScrapeSeats.of``): each
        visit's answer (None: not answered at the cut) and what waits for those (None: none)."""
        todo: list[tuple[list[str], dict[str, str]]] = []
        for (_, urls, _), (settled, counts) in zip(asks, scraped):
            asking = [u for u in urls if u not in settled]
            mirrored = self.mirrors.stand_ins(asking, counts) if self.settings.ask_mirrors_once else {}
            todo.append(([u for u in asking if u not in mirrored], mirrored))
        announcing = self.announcing([(h, asking, dht) for (h, _, dht), (asking, _) in zip(asks, todo)])
        answered = announcing.wait(cut)
        out: list = [None] * len(asks)
        self._answer(sorted(answered), asks, scraped, todo, announcing, out)
        if len(answered) == len(asks):
            return out, None
        pending = [i for i in range(len(asks)) if i not in answered]

        def rest() -> list:
            announcing.wait()
            self._answer(pending, asks, scraped, todo, announcing, out)
            return [out[i] for i in pending]

        return out, rest

    def _answer(self, ids: list[int], asks: list, scraped: list, todo: list, announcing: Announcing,
                out: list) -> None:
        """Visits ``ids``'s answers into ``out``: what their scrapes settled, then their announces; a
        tracker a mirror stood in for is asked after all when the one asked in its place failed."""
        redo: list[tuple[int, list[str]]] = []
        for i in ids:
            mirrored = todo[i][1]
            results = list(scraped[i][0].values()) + announcing.of(i)
            failed = {r.source for r in results if not r.ok}
            again = [u for u, kept in mirrored.items() if kept in failed]
            if again:
                redo.append((i, again))
                mirrored = {u: kept for u, kept in mirrored.items() if u not in again}
            out[i] = (results, mirrored)
        if redo:
            for (i, _), got in zip(redo, self.announce_many([(asks[i][0], again, False) for i, again in redo])):
                out[i][0].extend(got)
        for i in ids:
            self.mirrors.learn(out[i][0])

    def announce_many(self, asks: list[tuple[str, list[str], bool]]) -> list[list[SourceResult]]:
        """Each of ``asks`` (info-hash, URLs, DHT due) announced to its URLs and looked up in the DHT
        (``announcing``), waited for to the end: each visit's results in the order of its URLs, the
        DHT's last."""
        announcing = self.announcing(asks)
        announcing.wait()
        return [announcing.of(i) for i in range(len(asks))]

    def announcing(self, asks: list[tuple[str, list[str], bool]]) -> Announcing:
        """The announces and lookups of ``asks`` started (``workers.announcing``), each announce once it
        has its place in the announce cap (a tracker's announces with one place, as where no cap spaces
        them, go out in one ``Trackers.announce_many``) and each lookup in the DHT budget; the deadline
        starts after the longest wait."""
        asks = [(h, urls, dht and self.dht is not None) for h, urls, dht in asks]
        asked = [(u, i) for i, (_, urls, _) in enumerate(asks) for u in urls]
        looks = [i for i, (_, _, dht) in enumerate(asks) if dht]
        waits = self.cap.take_each([u for u, _ in asked])
        dht_waits = self.dht_budget.take_each(["*"] * len(looks), 1) if looks else []
        deadline = time.monotonic() + max([*waits, *dht_waits, 0.0]) + self.settings.visit_deadline
        announcing = Announcing(asks, deadline, self._bounded)
        groups: dict[tuple[str, float], list[int]] = {}
        for (u, i), wait in zip(asked, waits):
            groups.setdefault((u, wait), []).append(i)
        for (u, wait), ids in groups.items():
            hashes = [asks[i][0] for i in ids]
            announcing.tracker(u, ids, wait, partial(self.trackers.announce_many, u, hashes, deadline))
        for i, wait in zip(looks, dht_waits):
            announcing.lookup(i, wait, partial(self.dht.lookup, asks[i][0]))
        return announcing

    def scrape_seats(self, asks: list[tuple[str, list[str]]]) -> ScrapeSeats:
        """Every visit of ``asks`` (info-hash, URLs) seated in each of its trackers' scrapes (none with scrape
        first off): in a scrape asked ahead, or in each tracker's next scrape, whose request takes its
        place in the announce cap (``ScrapeAhead.seat``); the deadline starts after the longest of the
        seats' waits for their places. ``ScrapeSeats.of`` gives a visit's trackers whose scrape settles
        it, with their answers (``Trackers.scrape_first``), and the counts the others' scrapes reported;
        a tracker whose scrape does not settle the visit (the swarm has peers, or it cannot scrape) is
        left out: it is announced to. Raises only ``StoreError``."""
        patience = self.settings.visit_deadline
        answers: list[dict[str, SourceResult | None]] = [{} for _ in asks]
        seats = []
        for i, (h, urls) in enumerate(asks if self.settings.scrape_first else []):
            for u in urls:
                got = self.ahead.seat(u, h, patience)
                if isinstance(got, SourceResult):
                    answers[i][u] = got
                elif got is not None:
                    seats.append((i, u, got))
        deadline = time.monotonic() + max((seat.wait for *_, seat in seats), default=0.0) + patience
        return ScrapeSeats(len(asks), answers, seats, deadline,
                           lambda u, seat: self._source(u, lambda: self.trackers.scrape_answer(u, seat)))

    @staticmethod
    def _source(name: str, call: Callable[[], T]) -> T | SourceResult:
        """``call()``, or what it raised as ``name``'s failure (``StoreError``, ours, is raised)."""
        try:
            return call()
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - a source's bug is that source's failure
            return SourceResult.failed(name, redact.text(f"{type(e).__name__}: {e}", name))

    def _bounded(self, r: SourceResult) -> SourceResult:
        """``r`` with at most the per-source bound of peers (trackers cut their own; this bounds any source)."""
        return r.bounded(self.settings.source_peers_bound(r.max_peers))
