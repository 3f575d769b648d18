"""A batch's announces and lookups under way: each visit answered as its last source is.

A runner's batch (``Visitor.visit_many``) asks its trackers together, a
tracker's announces in one ``Trackers.announce_many`` greenlet and each DHT
lookup in one of its own; each answer is told to ``Announcing`` as it is
final (``got``), so a visit is answered the moment its last source is, not
when its tracker's whole batch is.

Why a cut. A batch that waited for its slowest visit would hold every slot
of it for one lost datagram (a retry after ``PEERCRAWL_UDP_TIMEOUT``) or one
long DHT lookup. ``wait(cut=True)`` returns once every visit is answered, or
once half of them are and as long again has passed (``CUT_LEAST`` at least):
the visits not answered by then go on apart (``wait()`` again), each with what it
would have had alone. At the deadline (plus a second's guard, as for one
visit) a source still silent is that source's failure and the jobs still
running are stopped. A ``StoreError`` (ours) from any job is raised to the
waiter.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
from gevent.event import Event

from crawler import redact, spawning
from crawler.errors import StoreError
from crawler.sources.result import SourceResult

# A source's failure when it gave nothing by the visit's deadline.
NO_ANSWER = "no answer within the visit deadline"
# The shortest wait, once half of a batch is answered, before the rest go on apart.
CUT_LEAST = 0.1


class Announcing:
    """The announces and lookups of ``asks`` (info-hash, URLs, DHT due) under way, until ``deadline``
    (``time.monotonic()``); ``bound(result)``: a result within the per-source bound of peers."""

    def __init__(self, asks: list[tuple[str, list[str], bool]], deadline: float,
                 bound: Callable[[SourceResult], SourceResult]):
        self.asks, self.deadline, self.bound = asks, deadline, bound
        self.results: list[dict[str, SourceResult]] = [{} for _ in asks]
        self.left = [len(set(urls)) + dht for _, urls, dht in asks]  # a source answers a visit once
        self.answered = {i for i, n in enumerate(self.left) if not n}
        self.jobs: list[gevent.Greenlet] = []
        self.error: StoreError | None = None
        self._wake = Event()
        self._began = time.monotonic()

    def got(self, i: int, source: str, r: SourceResult | None) -> None:
        """Visit ``i``'s answer from ``source`` (None: it gave nothing), final."""
        if source in self.results[i]:
            return
        self.results[i][source] = self.bound(r) if r is not None else SourceResult.failed(source, NO_ANSWER)
        self.left[i] -= 1
        if not self.left[i]:
            self.answered.add(i)
            self._wake.set()

    def tracker(self, url: str, ids: list[int], wait: float, ask: Callable) -> None:
        """Start ``ask(deliver)`` after ``wait`` seconds: the announces of ``url`` for visits ``ids``,
        ``deliver(position, result)`` each as it is final."""

        def job() -> None:
            try:
                ask(lambda j, r: self.got(ids[j], url, r))
            except StoreError as e:
                self._failed(e)
            except Exception as e:  # noqa: BLE001 - a source's bug is that source's failure
                failure = SourceResult.failed(url, redact.text(f"{type(e).__name__}: {e}", url))
                for i in ids:
                    self.got(i, url, failure)

        self.jobs.append(spawning.spawn_later(wait, job) if wait else spawning.spawn(job))

    def lookup(self, i: int, wait: float, look: Callable[[], SourceResult | None]) -> None:
        """Start visit ``i``'s DHT lookup ``look()`` after ``wait`` seconds."""

        def job() -> None:
            try:
                self.got(i, "dht", look())
            except StoreError as e:
                self._failed(e)
            except Exception as e:  # noqa: BLE001 - as for a tracker
                self.got(i, "dht", SourceResult.failed("dht", redact.text(f"{type(e).__name__}: {e}", "dht")))

        self.jobs.append(spawning.spawn_later(wait, job) if wait else spawning.spawn(job))

    def _failed(self, e: StoreError) -> None:
        self.error = e
        self._wake.set()

    def wait(self, cut: bool = False) -> set[int]:
        """The visits answered, once all are, or the deadline passed (and a second's guard: a source
        silent by then is its failure, and the jobs still running are stopped), or (``cut``) at the cut
        (module note), after which ``wait()`` waits for the rest. Raises a job's ``StoreError``."""
        until = Cut(self.deadline, len(self.asks), cut, self._began)
        self._wait(until)
        self._ended(until)
        return set(self.answered)

    def _wait(self, until: Cut) -> None:
        """Wait while a visit is unanswered and no job failed, as long as ``until`` lets."""
        while len(self.answered) < len(self.asks) and self.error is None:
            left = until.until(len(self.answered)) - time.monotonic()
            if left <= 0:
                return
            self._wake.clear()
            self._wake.wait(left)

    def _ended(self, until: Cut) -> None:
        """A job's ``StoreError`` raised (the jobs stopped); past the deadline, the jobs stopped and each
        source still silent its failure."""
        if self.error is not None:
            self._stop()
            raise self.error
        if len(self.answered) < len(self.asks) and until.late():
            self._stop()
            for i, (_, urls, dht) in enumerate(self.asks):
                for source in urls + (["dht"] if dht else []):
                    self.got(i, source, None)

    def _stop(self) -> None:
        for j in self.jobs:
            if not j.ready():
                j.kill(block=False)

    def of(self, i: int) -> list[SourceResult]:
        """Visit ``i``'s results: its URLs' in their order, the DHT's last."""
        _, urls, dht = self.asks[i]
        return [self.results[i][u] for u in urls] + ([self.results[i]["dht"]] if dht else [])


class Cut:
    """When a batch's wait ends (module note): at ``deadline`` and a second's guard (sources bound
    themselves; the second only guards a stuck one), or, with ``cut``, once half of its ``n`` visits
    are answered and as long again has passed since ``began`` (``CUT_LEAST`` at least)."""

    def __init__(self, deadline: float, n: int, cut: bool, began: float | None = None):
        self.end, self.n, self.cut = deadline + 1.0, n, cut
        self.began = time.monotonic() if began is None else began
        self.half: float | None = None

    def until(self, answered: int) -> float:
        """When the wait ends (``time.monotonic()``), ``answered`` visits being answered now."""
        if self.cut and self.half is None and 2 * answered >= self.n:
            self.half = time.monotonic()
        if self.half is None:
            return self.end
        return min(self.end, self.half + max(self.half - self.began, CUT_LEAST))

    def late(self) -> bool:
        """The deadline (and its guard) passed."""
        return time.monotonic() >= self.end
