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
    """

    def __init__(self, settings, trackers, dht, ahead, cap: RateBudget, dht_budget: RateBudget):
        self.settings, self.trackers, self.dht, self.ahead = settings, trackers, dht, ahead
        self.cap, self.dht_budget = cap, dht_budget
        self.mirrors = Mirrors(settings.tracker_cache_size, frozenset(settings.tracker_rates()))

    def ask(self, h: str, urls: list[str], dht: bool, laps=None) -> tuple[list[SourceResult], dict[str, str]]:
        """Every answer of ``urls`` and (``dht``) the DHT about ``h``, and the trackers a mirror stood
        in for (URL -> the URL asked in its place), which were not asked. ``laps``: the visit's
        ``workers.visit_stages.Laps``, told when the scrape stage ends."""
        scraped, counts = self.scrape(h, urls)
        if laps is not None:
            laps.lap("scrape")
        asking = [u for u in urls if u not in scraped]
        mirrored = self.mirrors.stand_ins(asking, counts) if self.settings.ask_mirrors_once else {}
        asking = [u for u in asking if u not in mirrored]
        results = list(scraped.values()) + self.announce(h, asking, dht)
        failed = {r.source for r in results if not r.ok}
        redo = [u for u, kept in mirrored.items() if kept in failed]
        if redo:
            mirrored = {u: kept for u, kept in mirrored.items() if u not in redo}
            results += self.announce(h, redo, False)
        self.mirrors.learn(results)
        return results, mirrored

    def announce(self, h: str, urls: list[str], dht: bool) -> list[SourceResult]:
        """``gather`` of ``urls`` and (``dht``) the DHT once each has its place in the announce cap
        (the DHT in its budget); the deadline starts after the longest wait."""
        waits = self.cap.take(urls)
        if dht:
            waits["dht"] = self.dht_budget.wait()
        deadline = time.monotonic() + max(waits.values(), default=0.0) + self.settings.visit_deadline
        return self.gather(h, urls, deadline, waits, dht)

    def gather(self, h: str, urls: list[str], deadline: float, waits: dict[str, float] | None = None,
               dht: bool = True) -> list[SourceResult]:
        """Ask ``urls`` and (``dht``: when this process has one) the DHT concurrently; every result by
        ``deadline`` (monotonic).

        ``waits``: seconds to wait before asking each URL (the announce cap's answer) and the DHT
        (``"dht"``, its budget's).
        """
        waits = waits or {}
        dht = dht and self.dht is not None
        if len(urls) == 1 and not dht:
            gevent.sleep(waits.get(urls[0], 0.0))
            u = urls[0]
            return [self._bounded(self._alone(u, lambda: self.trackers.announce(u, h, deadline, False), deadline,
                                              NO_ANSWER))]
        jobs: dict[str, gevent.Greenlet] = {
            u: gevent.spawn_later(waits[u], self.trackers.announce, u, h, deadline, False) if waits.get(u)
            else gevent.spawn(self.trackers.announce, u, h, deadline, False) for u in urls}
        if dht:
            jobs["dht"] = gevent.spawn_later(waits.get("dht", 0.0), self.dht.lookup, h)
        return [self._bounded(r) if r is not None else SourceResult.failed(name, NO_ANSWER)
                for name, r in self._joined(jobs, deadline, NO_ANSWER).items()]

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
        if not urls or not self.settings.scrape_first:
            return {}, {}
        patience = self.settings.visit_deadline
        answers: dict[str, SourceResult | None] = {}
        seats = {}
        for u in urls:
            got = self.ahead.seat(u, h, patience)
            if isinstance(got, SourceResult):
                answers[u] = got
            elif got is not None:
                seats[u] = got
        deadline = time.monotonic() + max((seat.wait for seat in seats.values()), default=0.0) + patience
        if len(seats) == 1:
            [(u, seat)] = seats.items()
            answers[u] = self._alone(u, lambda: self.trackers.scrape_answer(u, seat), deadline, NO_SCRAPE)
        elif seats:
            jobs = {u: gevent.spawn(self.trackers.scrape_answer, u, seat) for u, seat in seats.items()}
            answers.update(self._joined(jobs, deadline, NO_SCRAPE))
        counts = {u: seat.counts() for u, seat in seats.items() if answers.get(u) is None}
        return {u: r for u, r in answers.items() if r is not None}, {u: c for u, c in counts.items() if c}

    def _joined(self, jobs: dict[str, gevent.Greenlet], deadline: float, late: str) -> dict[str, SourceResult | None]:
        """Each source's job (source name -> greenlet) waited for until ``deadline`` (monotonic): its
        value, or its failure (what it raised, or ``late``). Raises ``StoreError`` (ours)."""
        try:
            # Sources bound themselves; the extra second only guards a stuck one.
            gevent.joinall(list(jobs.values()), timeout=max(deadline - time.monotonic(), 0) + 1.0)
        finally:
            for j in jobs.values():
                if not j.ready():
                    j.kill(block=False)
        out: dict[str, SourceResult | None] = {}
        for name, j in jobs.items():
            if j.successful():
                out[name] = j.value
            elif j.ready() and j.exception is not None and not isinstance(j.exception, gevent.GreenletExit):
                if isinstance(j.exception, StoreError):
                    raise j.exception
                out[name] = SourceResult.failed(name, redact.text(f"{type(j.exception).__name__}: {j.exception}", name))
            else:
                out[name] = SourceResult.failed(name, late)
        return out

    def _alone(self, name: str, call: Callable[[], T], deadline: float, late: str) -> T | SourceResult:
        """``call()`` of one source from this greenlet (no greenlet to start for a lone source): its
        value, or its failure as ``_joined`` gives it."""
        # The source bounds itself by the deadline; the extra second only guards a stuck one.
        # False: the block ends silently at the timeout (gevent documents it; its stubs leave it out)
        with gevent.Timeout(max(deadline - time.monotonic(), 0) + 1.0, False):  # type: ignore[arg-type]
            try:
                return call()
            except StoreError:
                raise
            except Exception as e:  # noqa: BLE001 - a source's bug is that source's failure, as in _joined
                return SourceResult.failed(name, redact.text(f"{type(e).__name__}: {e}", name))
        return SourceResult.failed(name, late)

    def _bounded(self, r: SourceResult) -> SourceResult:
        """``r`` with at most the per-source bound of peers (trackers cut their own; this bounds any source)."""
        return r.bounded(self.settings.source_peers_bound(r.max_peers))
