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
the visits not answered by then go on apart (``finish``), each with what it
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

from crawler import redact
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

        self.jobs.append(gevent.spawn_later(wait, job) if wait else gevent.spawn(job))

    def lookup(self, i: int, wait: float, look: Callable[[], SourceResult | None]) -> None:
        """Start visit ``i``'s DHT lookup ``look()`` after ``wait`` seconds."""

        def job() -> None:
            try:
                self.got(i, "dht", look())
            except StoreError as e:
                self._failed(e)
            except Exception as e:  # noqa: BLE001 - as for a tracker
                self.got(i, "dht", SourceResult.failed("dht", redact.text(f"{type(e).__name__}: {e}", "dht")))

        self.jobs.append(gevent.spawn_later(wait, job) if wait else gevent.spawn(job))

    def _failed(self, e: StoreError) -> None:
        self.error = e
        self._wake.set()

    def wait(self, cut: bool = False) -> set[int]:
        """The visits answered, once all are, or the deadline passed, or (``cut``) at the cut (module
        note); past the deadline the rest are ended (``finish``). Raises a job's ``StoreError``."""
        n, half = len(self.asks), None
        while len(self.answered) < n and self.error is None:
            now = time.monotonic()
            until = self.deadline + 1.0  # sources bound themselves; the second only guards a stuck one
            if cut and half is None and 2 * len(self.answered) >= n:
                half = now
            if half is not None:
                until = min(until, half + max(half - self._began, CUT_LEAST))
            if now >= until:
                break
            self._wake.clear()
            self._wake.wait(until - now)
        if self.error is None and len(self.answered) < n and time.monotonic() >= self.deadline + 1.0:
            self.finish()
        if self.error is not None:
            self._stop()
            raise self.error
        return set(self.answered)

    def finish(self) -> None:
        """Wait for every visit (until the deadline, and a second's guard): a source silent by then is its
        failure, and the jobs still running are stopped. Raises a job's ``StoreError``."""
        while len(self.answered) < len(self.asks) and self.error is None:
            left = self.deadline + 1.0 - time.monotonic()
            if left <= 0:
                break
            self._wake.clear()
            self._wake.wait(left)
        if self.error is not None:
            self._stop()
            raise self.error
        if len(self.answered) < len(self.asks):
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
