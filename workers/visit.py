"""One visit of one claimed torrent, end to end (contract §1–§4).

Strategy: one round trip reads the torrent's own trackers and the times
before which each may not be re-announced (``tracker_min_interval``). With
an announce cap set, the visit first waits for its places in the cap's
schedule (``crawler.sources.announce_cap``); its deadline starts after that.
Every eligible tracker (each at its place) and the DHT are asked at once,
each in its own greenlet and all under one deadline. Then, in this order:

1. the not-before times the trackers just gave are kept
   (``Queue.hold_trackers``): now + the tracker's ``min interval`` (HTTP
   trackers), else now + ``tracker_floor`` (default 0: BEP 15 replies carry
   no min interval, and the revisit interval, 1800 s by default, already
   spaces announces);
2. no source answered: ``Queue.fail`` (score kept, short retry; contract §1);
3. otherwise the peers are recorded (§4) *before* the completion, so a crash
   between the two leaves a lease that expires and a retry that counts only
   what was not yet counted; the score is then applied once (§2) by
   ``Queue.complete``, and when the pool wants the greenlet's next torrent it
   is claimed with the other runners' next claims (``workers.claims``).

A torrent whose trackers are all still inside their min interval and that
has no DHT is not announced at all: ``Queue.defer`` puts it back to cooling
until the first of them may be asked again (``Visit.skipped``), which is
neither a visit nor a failure.

Redis steps of a visit: the plan, the recording (its batch's probe and
record calls), the completion, the next claim (one claim for the runners
asking together) and ``torrents.processed`` once per torrent and hour
(skipped for a revisit inside the hour); each shares its round trip with
other visits' steps (``crawler.store.coalesce``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gevent

from crawler import logs, redact
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.scoring import SourceCount, outcome
from crawler.queue.transitions import Lease, Queue
from crawler.settings import Settings
from crawler.sources.announce_cap import AnnounceCap
from crawler.sources.result import SourceResult, VisitResult
from crawler.store import patience
from crawler.store.outage import Outage
from workers.claims import Claims

log = logs.get("worker.visit")

# Not-before entries outlive the longest min interval a tracker may ask for.
MIN_INTERVAL_CAP = 6 * 3600.0
# Torrents remembered as noted for torrents.processed in the current hour:
# bounded memory (~100 bytes each); past it, visits just ask the recorder.
NOTED_CAP = 200_000


# A source's failure when it gave nothing by the visit's deadline.
NO_ANSWER = "no answer within the visit deadline"
NO_SCRAPE = "no scrape answer within the visit deadline"


@dataclass(frozen=True)
class Visit:
    """What one visit did: ``state`` is cooling, evicted, failed, skipped or stale."""

    info_hash: str
    state: str
    score: float | None
    peers: int
    new: int
    answered: int
    asked: int
    error: str | None = None


class Visitor:
    """Visits claimed torrents; one per worker process, shared by its greenlets.

    ``trackers``: a ``crawler.sources.trackers.Trackers``; ``dht``: a
    ``DhtSource`` or None; ``recorder``: a ``crawler.counters.Recorder``, or the worker's
    ``crawler.counters.batcher.Batcher`` around it (recordings made together).
    ``settings.tracker_floor``: seconds a tracker is left alone for a torrent
    when it gave no min interval. ``outage``: the process's ``Outage``
    (default: the one of ``queue.client``). ``claims``: where the next
    torrents are claimed (default: a ``Claims`` of ``queue``, shared by every
    greenlet of the process). ``cap``: the announce cap (default: an
    ``AnnounceCap`` of ``queue``'s client, idle when no cap is set); a visit
    waits for it before its deadline starts. ``visit`` raises only
    ``StoreError`` (Redis).

    Each Redis step of a visit waits for a Redis that went away, inside the
    client (``crawler.store.outage``), for up to ``PEERCRAWL_REDIS_WAIT_SECONDS``;
    past that the visit ends with ``StoreError`` and its lease expires.
    Sending a step again is safe: the plan is a read, the trackers' min
    intervals are overwritten, the recording's dedupe marks and the
    completion's lease token make a second run count nothing.
    """

    def __init__(self, queue: Queue, keys: Keys, settings: Settings, trackers, recorder, dht=None,
                 outage: Outage | None = None, claims: Claims | None = None, cap: AnnounceCap | None = None):
        self.queue, self.keys, self.settings = queue, keys, settings
        self.cap = cap or AnnounceCap(queue.client, keys, settings)
        self.outage = outage or patience.outage(queue.client) or Outage(patience=settings.redis_wait_seconds)
        self.claims = claims or Claims(queue, self.outage)
        self.trackers, self.recorder, self.dht = trackers, recorder, dht
        self._defaults = tuple(t.url for t in settings.trackers)
        self._hour, self._noted = -1, set()

    def _plan(self, h: str) -> tuple[list[str], dict[str, float]]:
        """(every tracker of ``h``, tracker -> not-before time) in one round trip."""
        own, not_before = self.queue.plan(h)
        urls = list(dict.fromkeys(self._defaults + tuple(sorted(own))))
        return urls, not_before

    def gather(self, h: str, urls: list[str], deadline: float, waits: dict[str, float] | None = None,
               ) -> list[SourceResult]:
        """Ask ``urls`` and the DHT concurrently; every result by ``deadline`` (monotonic).

        ``waits``: seconds to wait before asking each URL (the announce cap's answer).
        """
        waits = waits or {}
        if len(urls) == 1 and self.dht is None:
            gevent.sleep(waits.get(urls[0], 0.0))
            u = urls[0]
            return [self._bounded(self._alone(u, lambda: self.trackers.announce(u, h, deadline, False), deadline,
                                              NO_ANSWER))]
        jobs = {u: gevent.spawn_later(waits[u], self.trackers.announce, u, h, deadline, False) if waits.get(u)
                else gevent.spawn(self.trackers.announce, u, h, deadline, False) for u in urls}
        if self.dht is not None:
            jobs["dht"] = gevent.spawn(self.dht.lookup, h)
        return [self._bounded(r) if r is not None else SourceResult.failed(name, NO_ANSWER)
                for name, r in self._joined(jobs, deadline, NO_ANSWER).items()]

    def scrape(self, h: str, urls: list[str], deadline: float) -> dict[str, SourceResult]:
        """The trackers of ``urls`` whose scrape settles this visit, with their answers (``Trackers.scrape_first``).

        Every tracker is scraped at once; one whose scrape does not settle
        the visit (the swarm has peers, or it cannot scrape) is left out: it
        is announced to. Raises only ``StoreError``.
        """
        if not urls or not self.settings.scrape_first:
            return {}
        if len(urls) == 1:
            u = urls[0]
            answers = {u: self._alone(u, lambda: self.trackers.scrape_first(u, h, deadline), deadline, NO_SCRAPE)}
        else:
            jobs = {u: gevent.spawn(self.trackers.scrape_first, u, h, deadline) for u in urls}
            answers = self._joined(jobs, deadline, NO_SCRAPE)
        return {u: r for u, r in answers.items() if r is not None}

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

    def _alone(self, name: str, call, deadline: float, late: str) -> SourceResult | None:
        """``call()`` of one source from this greenlet (no greenlet to start for a lone source): its
        value, or its failure as ``_joined`` gives it."""
        # The source bounds itself by the deadline; the extra second only guards a stuck one.
        with gevent.Timeout(max(deadline - time.monotonic(), 0) + 1.0, False):
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

    def _not_before(self, r: SourceResult, now: float) -> float:
        wait = r.min_interval if r.min_interval is not None else self.settings.tracker_floor
        return now + min(max(wait, 0.0), MIN_INTERVAL_CAP)

    def visit(self, lease: Lease) -> Visit:
        """Visit ``lease``'s torrent and settle it in the queue."""
        return self.visit_then_claim(lease)[0]

    def visit_then_claim(self, lease: Lease, claim: Callable[[], int] | None = None) -> tuple[Visit, list[Lease]]:
        """Visit ``lease``'s torrent, settle it, and claim ``claim()`` more torrents.

        ``claim`` is asked once, when the visit settles (so a stop requested
        meanwhile is seen); the claim is made with the other runners' after the
        completion (``workers.claims``). Returns the visit and the new leases.
        """
        h = lease.info_hash
        s = self.settings
        start = time.time()
        urls, not_before = self._plan(h)
        eligible = [u for u in urls if not_before.get(u, 0.0) <= start]
        if not eligible and self.dht is None:
            due = min([not_before[u] for u in urls], default=start + s.retry_seconds)
            # Nothing was asked: back to cooling, score kept, neither a visit nor a failure.
            self.queue.defer(lease, max(due, start + 1))
            return Visit(h, "skipped", lease.score, 0, 0, 0, 0), self._claim(claim)
        # Scrape first: trackers that report the swarm empty (or fail) are settled without an announce.
        scraped = self.scrape(h, eligible, time.monotonic() + s.visit_deadline)
        asking = [u for u in eligible if u not in scraped]
        # Waiting for the announce cap is not part of the visit's time: the deadline starts after it.
        waits = self.cap.take(asking)
        deadline = time.monotonic() + max(waits.values(), default=0.0) + s.visit_deadline
        results = list(scraped.values()) + self.gather(h, asking, deadline, waits)
        now = time.time()
        answered = [r for r in results if r.ok]
        fresh = {r.source: self._not_before(r, now) for r in answered if r.source != "dht"}
        fresh = {u: t for u, t in fresh.items() if t > now}
        if fresh:
            self.queue.hold_trackers(h, fresh, MIN_INTERVAL_CAP + s.revisit_seconds)
            not_before.update(fresh)
        if not answered:
            # Shown by `torrent` and kept in Redis: tracker URLs redacted (their passkeys).
            error = "; ".join(f"{redact.url(r.source)}: {redact.text(r.error or '', r.source)}"
                              for r in results)[:200] or "no source to ask"
            self.queue.fail(lease, error, now=now)
            return Visit(h, "failed", lease.score, 0, 0, 0, len(results), error), self._claim(claim)
        vr = VisitResult(h, tuple(results))
        ips = vr.peer_ips
        new = self.recorder.record_visit(h, ips, now) if ips else 0
        counts = [SourceCount(max(r.returned or 0, len(r.peers)), r.max_peers) for r in answered]
        o = outcome(len(ips), new, counts, s.new_fraction)
        due = now + s.revisit_seconds
        if self.dht is None and urls:
            # Nothing to ask before the first tracker's min interval ends.
            due = max(due, min(not_before.get(u, 0.0) for u in urls))
        # torrents.processed before the completion: a crash in between retries
        # a visit already noted this hour, which the recorder does not count twice.
        self._processed(h, now)
        seeders, leechers = vr.seeders, vr.leechers
        n = claim() if claim is not None else 0
        state, score = self.queue.complete(lease, o, peers=len(ips), seeders=seeders, leechers=leechers,
                                           due=due, now=now)
        return Visit(h, state, score, len(ips), new, len(answered), len(results)), self.claims.claim(n)

    def _claim(self, claim: Callable[[], int] | None) -> list[Lease]:
        """The next leases after a visit that did not complete (failed or skipped)."""
        return self.claims.claim(claim() if claim is not None else 0)

    def _processed(self, h: str, now: float) -> None:
        """``Recorder.visited`` once per torrent and clock hour from this process.

        The recorder counts a torrent at most once per UTC clock hour; a
        second call in the same hour can only answer "already counted", so
        this process skips its round trip (revisits inside the hour).
        """
        hour = int(now) // 3600
        if hour != self._hour:
            self._hour, self._noted = hour, set()
        if h in self._noted:
            return
        self.recorder.visited(h, now)
        if len(self._noted) < NOTED_CAP:
            self._noted.add(h)

