"""A visit's sources asked at once, under one deadline: scrapes first, then announces and the DHT.

``Asking.ask(h, urls, dht)`` is the asking stage of a visit
(``workers.visit``): every tracker of ``urls`` is scraped at once (most
often a seat in a scrape asked ahead, ``workers.scrape_ahead``); those that
report the swarm empty, or fail, are settled without an announce. Of the
others, a tracker learned to list the same peers as one asked before it
(``crawler.sources.trackers.tracker_mirrors``), its scrape of this torrent agreeing,
is not announced to; should the tracker asked in its place fail, it is
asked after all. The rest wait for their places in the announce cap, the
DHT (when due) for its budget's, and are asked each in its own greenlet;
the deadline starts after the longest wait. Every source bounds itself; a
source that raised or gave nothing by the deadline is that source's
failure, never the visit's. Raises only ``StoreError``.

``Asking.ask_many`` asks a batch of visits at once (``Visitor.visit_many``):
their seats and announces go out together, a tracker's announces of the
batch in one ``Trackers.announce_many``, and the batch waits for the last
answer (each source bound by the deadline, as for one visit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import gevent

from crawler import redact
from crawler.errors import StoreError
from crawler.sources.rate_budget import RateBudget
from crawler.sources.result import SourceResult
from crawler.sources.trackers.tracker_mirrors import Mirrors

# A source's failure when it gave nothing by the visit's deadline.
NO_ANSWER = "no answer within the visit deadline"
NO_SCRAPE = "no scrape answer within the visit deadline"

T = TypeVar("T")


class Asking:
    """The asking stage of one worker process's visits (shared by its greenlets).

    ``trackers``: its ``Trackers``; ``dht``: its ``DhtSource`` or None;
    ``ahead``: its ``ScrapeAhead``; ``cap`` and ``dht_budget``: the
    namespace's announce cap and DHT budget (``RateBudget``); ``mirrors``:
    the trackers learned to list the same peers.

    A batch of visits (``ask_many``) is asked from the caller's greenlet: every
    scrape seat taken, then waited for in turn (the requests are under way
    together); the announces of one tracker in one ``Trackers.announce_many``
    (a greenlet a tracker, none for a lone one), each DHT lookup in a
    greenlet of its own. A visit's answers are what it would have had alone.
    """

    def __init__(self, settings, trackers, dht, ahead, cap: RateBudget, dht_budget: RateBudget):
        self.settings, self.trackers, self.dht, self.ahead = settings, trackers, dht, ahead
        self.cap, self.dht_budget = cap, dht_budget
        self.mirrors = Mirrors(settings.tracker_cache_size, frozenset(settings.tracker_rates()))

    def ask(self, h: str, urls: list[str], dht: bool, laps=None) -> tuple[list[SourceResult], dict[str, str]]:
        """Every answer of ``urls`` and (``dht``) the DHT about ``h``, and the trackers a mirror stood
        in for (URL -> the URL asked in its place), which were not asked. ``laps``: the visit's
        ``workers.visit_stages.Laps``, told when the scrape stage ends."""
        return self.ask_many([(h, urls, dht)], laps)[0]

    def ask_many(self, asks: list[tuple[str, list[str], bool]], laps=None) -> list[tuple[list[SourceResult], dict]]:
        """``ask`` of each of ``asks`` (info-hash, URLs, DHT due), together (class note)."""
        scraped = self.scrape_many([(h, urls) for h, urls, _ in asks])
        if laps is not None:
            laps.lap("scrape")
        todo: list[tuple[list[str], dict[str, str]]] = []
        for (_, urls, _), (settled, counts) in zip(asks, scraped):
            asking = [u for u in urls if u not in settled]
            mirrored = self.mirrors.stand_ins(asking, counts) if self.settings.ask_mirrors_once else {}
            todo.append(([u for u in asking if u not in mirrored], mirrored))
        announced = self.announce_many([(h, asking, dht) for (h, _, dht), (asking, _) in zip(asks, todo)])
        out: list[tuple[list[SourceResult], dict]] = []
        redo: list[tuple[int, list[str]]] = []
        for i, ((settled, _), (_, mirrored), got) in enumerate(zip(scraped, todo, announced)):
            results = list(settled.values()) + got
            failed = {r.source for r in results if not r.ok}
            again = [u for u, kept in mirrored.items() if kept in failed]
            if again:  # the tracker asked in their place failed: they are asked after all
                redo.append((i, again))
                mirrored = {u: kept for u, kept in mirrored.items() if u not in again}
            out.append((results, mirrored))
        if redo:
            for (i, _), got in zip(redo, self.announce_many([(asks[i][0], again, False) for i, again in redo])):
                out[i][0].extend(got)
        for results, _ in out:
            self.mirrors.learn(results)
        return out

    def announce_many(self, asks: list[tuple[str, list[str], bool]]) -> list[list[SourceResult]]:
        """Each of ``asks`` (info-hash, URLs, DHT due) announced to its URLs and looked up in the DHT,
        each announce once it has its place in the announce cap (a tracker's announces with one place,
        as where no cap spaces them, go out in one ``Trackers.announce_many``) and each lookup in the
        DHT budget; the deadline starts after the longest wait. Each visit's results in the order of
        its URLs, the DHT's last."""
        asked = [(u, i) for i, (_, urls, _) in enumerate(asks) for u in urls]
        looks = [i for i, (_, _, dht) in enumerate(asks) if dht] if self.dht is not None else []
        waits = self.cap.take_each([u for u, _ in asked])
        dht_waits = self.dht_budget.take_each(["*"] * len(looks), 1) if looks else []
        deadline = time.monotonic() + max([*waits, *dht_waits, 0.0]) + self.settings.visit_deadline
        groups: dict[tuple[str, float], list[int]] = {}
        for (u, i), wait in zip(asked, waits):
            groups.setdefault((u, wait), []).append(i)
        if len(groups) == 1 and not looks:
            [((u, wait), ids)] = groups.items()
            gevent.sleep(wait)
            got = self._alone(u, lambda: self.trackers.announce_many(u, [asks[i][0] for i in ids], deadline),
                              deadline, NO_ANSWER)
            joined = [got]
        else:
            jobs = [(u, self._later(wait, self.trackers.announce_many, u, [asks[i][0] for i in ids], deadline))
                    for (u, wait), ids in groups.items()]
            jobs += [("dht", self._later(wait, self.dht.lookup, asks[i][0])) for i, wait in zip(looks, dht_waits)]
            joined = self._joined(jobs, deadline, NO_ANSWER)
        by_url: list[dict[str, SourceResult]] = [{} for _ in asks]
        for ((u, _), ids), got in zip(groups.items(), joined):
            for i, r in zip(ids, got if isinstance(got, list) else [got] * len(ids)):
                by_url[i][u] = self._bounded(r)
        out = [[by_url[i][u] for u in urls] for i, (_, urls, _) in enumerate(asks)]
        for i, r in zip(looks, joined[len(groups):]):
            out[i].append(self._bounded(r) if r is not None else SourceResult.failed("dht", NO_ANSWER))
        return out

    @staticmethod
    def _later(wait: float, call, *args) -> gevent.Greenlet:
        return gevent.spawn_later(wait, call, *args) if wait else gevent.spawn(call, *args)

    def scrape(self, h: str, urls: list[str]) -> tuple[dict[str, SourceResult], dict]:
        """The trackers of ``urls`` whose scrape settles this visit, with their answers (``Trackers.scrape_first``),
        and the counts the others' scrapes reported (URL -> ``ScrapeCounts``).

        Every tracker is scraped at once: the torrent takes its seat in a scrape
        asked ahead, or one in each tracker's next scrape (whose request takes
        its place in the announce cap: ``ScrapeAhead.seat``), and the scrape
        stage's deadline starts after the longest of those waits. A tracker whose scrape does not settle the visit (the
        swarm has peers, or it cannot scrape) is left out: it is announced
        to. Raises only ``StoreError``.
        """
        return self.scrape_many([(h, urls)])[0]

    def scrape_many(self, asks: list[tuple[str, list[str]]]) -> list[tuple[dict[str, SourceResult], dict]]:
        """``scrape`` of each of ``asks`` (info-hash, URLs): every seat taken, then each waited for in
        turn under one deadline (the requests are under way together)."""
        if not self.settings.scrape_first:
            return [({}, {}) for _ in asks]
        patience = self.settings.visit_deadline
        answers: list[dict[str, SourceResult | None]] = [{} for _ in asks]
        seats = []
        for i, (h, urls) in enumerate(asks):
            for u in urls:
                got = self.ahead.seat(u, h, patience)
                if isinstance(got, SourceResult):
                    answers[i][u] = got
                elif got is not None:
                    seats.append((i, u, got))
        if seats:
            deadline = time.monotonic() + max(seat.wait for *_, seat in seats) + patience
            # The requests bound themselves by the deadline; the extra second only guards a stuck one.
            # False: the block ends silently at the timeout (gevent documents it; its stubs leave it out)
            with gevent.Timeout(max(deadline - time.monotonic(), 0) + 1.0, False):  # type: ignore[arg-type]
                for i, u, seat in seats:
                    answers[i][u] = self._source(u, lambda: self.trackers.scrape_answer(u, seat))  # noqa: B023
            for i, u, _ in seats:
                answers[i].setdefault(u, SourceResult.failed(u, NO_SCRAPE))
        counts: list[dict] = [{} for _ in asks]
        for i, u, seat in seats:
            c = seat.counts() if answers[i][u] is None else None
            if c:
                counts[i][u] = c
        return [({u: r for u, r in a.items() if r is not None}, c) for a, c in zip(answers, counts)]

    def _joined(self, jobs: list[tuple[str, gevent.Greenlet]], deadline: float, late: str) -> list:
        """Each source's job (source name, greenlet) waited for until ``deadline`` (monotonic): its
        value, or its failure (what it raised, or ``late``). Raises ``StoreError`` (ours)."""
        try:
            # Sources bound themselves; the extra second only guards a stuck one.
            gevent.joinall([j for _, j in jobs], timeout=max(deadline - time.monotonic(), 0) + 1.0)
        finally:
            for _, j in jobs:
                if not j.ready():
                    j.kill(block=False)
        out: list = []
        for name, j in jobs:
            if j.successful():
                out.append(j.value)
            elif j.ready() and j.exception is not None and not isinstance(j.exception, gevent.GreenletExit):
                if isinstance(j.exception, StoreError):
                    raise j.exception
                out.append(SourceResult.failed(name, redact.text(f"{type(j.exception).__name__}: {j.exception}", name)))
            else:
                out.append(SourceResult.failed(name, late))
        return out

    def _alone(self, name: str, call: Callable[[], T], deadline: float, late: str) -> T | SourceResult:
        """``call()`` of one source from this greenlet (no greenlet to start for a lone source): its
        value, or its failure as ``_joined`` gives it."""
        # The source bounds itself by the deadline; the extra second only guards a stuck one.
        # False: the block ends silently at the timeout (gevent documents it; its stubs leave it out)
        with gevent.Timeout(max(deadline - time.monotonic(), 0) + 1.0, False):  # type: ignore[arg-type]
            return self._source(name, call)
        return SourceResult.failed(name, late)

    @staticmethod
    def _source(name: str, call: Callable[[], T]) -> T | SourceResult:
        """``call()``, or what it raised as ``name``'s failure (``StoreError``, ours, is raised)."""
        try:
            return call()
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - a source's bug is that source's failure, as in _joined
            return SourceResult.failed(name, redact.text(f"{type(e).__name__}: {e}", name))

    def _bounded(self, r: SourceResult) -> SourceResult:
        """``r`` with at most the per-source bound of peers (trackers cut their own; this bounds any source)."""
        return r.bounded(self.settings.source_peers_bound(r.max_peers))
