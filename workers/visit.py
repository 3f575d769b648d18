"""The visits of claimed torrents, end to end (contract §1–§4).

Strategy: one round trip reads the torrent's own trackers and its source
notes (``crawler.queue.source_notes``: when each tracker may be announced
to again, when the DHT is next due), or none when scrape-ahead read them
after the torrent was claimed ahead (``ScrapeAhead.plan_read``). URLs of
one tracker (``tracker_urls.by_tracker``) are asked once, at the preferred
URL, and held together. Then the asking stage (``workers.asking``): trackers
are scraped first, most often in a request asked ahead of the visit (the
ones that report the swarm empty, or fail, settle it without an announce);
a tracker learned to mirror another is not announced to while their scrapes
agree; the rest and the DHT, when due (``crawler.sources.dht.dht_schedule``),
are asked at once, each at its place in the announce cap or DHT budget,
under one deadline that starts after those waits. Then, in this order:

1. the visit's notes are made (``workers.visit_notes``), to be kept in one
   step: when each tracker and the DHT may be asked again, what each source
   did; none when they are what the plan read and live long enough as they are;
2. no source answered: the notes are kept, then ``Queue.fail`` (score kept,
   short retry; contract §1);
3. otherwise the peers are recorded (§4) *before* the completion, so a crash
   between the two leaves a lease that expires and a retry that counts only
   what was not yet counted; the score is then applied once (§2) by
   ``Queue.complete`` on the sources asked (a skipped DHT is not one), the
   notes written first in its step (a visit a crash ends before then keeps
   no notes: its retry may ask a tracker inside its min interval once).

A torrent whose trackers are all still inside their min interval and whose
DHT lookup is not due is not asked at all: ``Queue.defer`` puts it back to
cooling until the first of them may be asked again (``Visit.skipped``), which
is neither a visit nor a failure.

A runner visits a batch of torrents at once (``Visitor.visit_many``): each
stage above takes the whole batch, so the batch's Redis steps are one plan
read (none for torrents claimed ahead), one recording (then
``torrents.processed``, once per torrent and hour), one completion with the
notes, one claim; each shares its round trip with other runners' steps
(``crawler.store.group_commit``). A skipped or failed visit is settled by
its own calls meanwhile. Why: a visit alone handed each step to a batcher
and parked (~10 greenlet switches, 4-5 group-commit requests, ~30 timeouts),
most of a revisit's CPU; a batch pays them once. The visits not answered at
the asking stage's cuts go on apart (``workers.scrape_seats``,
``workers.announcing``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import gevent

from crawler import logs, redact, spawning
from crawler.counters.batcher import Batcher
from crawler.keys import Keys
from crawler.observer import QUIET, Observer
from crawler.queue.queue import Completion, Lease, Queue
from crawler.queue.scoring import SourceCount, outcome
from crawler.settings import Settings
from crawler.sources.rate_budget import RateBudget
from crawler.sources.result import SourceResult, VisitResult
from crawler.store import patience
from crawler.store.outage import Outage
from workers.asking import Asking
from workers.claims import Claims
from workers.completions import Completions
from workers.scrape_ahead import ScrapeAhead
from workers.visit_notes import Plan, failure_text, notes_made, plan_of
from workers.visit_stages import Laps, StageTimes

log = logs.get("worker.visit")

# Torrents remembered as noted for torrents.processed in the current hour:
# bounded memory (~100 bytes each); past it, visits just ask the recorder.
NOTED_CAP = 200_000


class Visit(NamedTuple):
    """What one visit did: ``state`` is cooling, evicted, failed, skipped or stale."""

    info_hash: str
    state: str
    score: float | None
    peers: int
    new: int
    answered: int
    asked: int
    error: str | None = None
    # A failed visit whose sources all went unanswered: what an outage looks like. One that a
    # tracker refused, or the address policy, says nothing about the network.
    network: bool = True


class Visitor:
    """Visits claimed torrents; one per worker process, shared by its greenlets.

    ``trackers``: a ``crawler.sources.trackers.trackers.Trackers``; ``dht``: a
    ``DhtSource`` or None; ``recorder``: a ``crawler.counters.Recorder`` (recorded through a
    ``crawler.counters.batcher.Batcher`` around it), or the worker's ``Batcher``.
    ``settings.tracker_floor``: seconds a tracker is left alone for a torrent
    when it gave no min interval. ``outage``: the process's ``Outage``
    (default: the one of ``queue.client``). ``claims``: where the next
    torrents are claimed (default: a ``Claims`` of ``queue``, shared by every
    greenlet of the process). ``cap``: the announce cap (default: an
    ``RateBudget.announce_cap`` of ``queue``'s client, idle when no cap is set); a visit
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
                 outage: Outage | None = None, claims: Claims | None = None, cap: RateBudget | None = None,
                 dht_budget: RateBudget | None = None, sizes=None, names=None, observer: Observer = QUIET):
        self.queue, self.keys, self.settings = queue, keys, settings
        self.observer, self.stages = observer, StageTimes()
        self.cap = cap or RateBudget.announce_cap(queue.client, keys, settings)
        self.dht_budget = dht_budget or RateBudget.dht(queue.client, keys, settings)
        self.outage = outage or patience.outage(queue.client) or Outage(patience=settings.redis_wait_seconds)
        self.trackers, self.dht, self.sizes, self.names = trackers, dht, sizes, names
        # a batch's recordings handed over at once (``Batcher.record_many``)
        self.recorder = recorder if isinstance(recorder, Batcher) else Batcher(recorder)
        self._defaults = tuple(t.url for t in settings.trackers)
        # Scrapes asked ahead of the visits, per tracker in full requests, of the torrents claimed
        # ahead and of those about to fall due (workers.scrape_ahead).
        self.ahead = ScrapeAhead(queue, trackers, settings, self._place, self._defaults)
        self.claims = claims or Claims(queue, self.outage, ahead=self.ahead.want, on_ahead=self.ahead.held)
        if claims is None:
            self.ahead.claims = self.claims
        self.completions = Completions(queue)
        self._hour = -1
        self._noted: set[str] = set()  # torrents whose visit this hour was noted
        self._blocked: set[str] = set()  # trackers the address policy refused, each logged once
        self.asking = Asking(settings, trackers, dht, self.ahead, self.cap, self.dht_budget)

    def _place(self, url: str) -> Callable[[], float]:
        """What takes one scrape request to ``url`` its place in the announce cap (seconds to wait)."""
        return lambda: self.cap.take([url], per=1)[url]

    def visit(self, lease: Lease) -> Visit:
        """Visit ``lease``'s torrent and settle it in the queue."""
        return self.visit_then_claim(lease)[0]

    def visit_then_claim(self, lease: Lease, claim: Callable[[], int] | None = None) -> tuple[Visit, list[Lease]]:
        """Visit ``lease``'s torrent, settle it, and claim ``claim()`` more torrents (``visit_many``
        of one). Raises the ``StoreError`` that ended the visit."""
        visits, leases = self.visit_many([lease], None if claim is None else lambda _: claim())
        v = visits[0]
        if isinstance(v, Exception):
            raise v
        assert v is not None  # no part of a batch goes on apart without ``split``
        return v, leases

    def visit_many(self, leases: list[Lease], claim: Callable[[int], int] | None = None,
                   split: Callable[[list[int], Callable], None] | None = None
                   ) -> tuple[list[Visit | Exception | None], list[Lease]]:
        """Visit the torrents of ``leases`` together, settle each, and claim ``claim(k)`` more torrents
        (``k``: the visits settled).

        Each stage takes the whole batch at once: one plan read, the scrapes and
        announces (``Asking.ask_batch``: a tracker's in one request batch), one
        recording, one completion; a visit that is skipped or failed is settled
        by calls of its own, meanwhile. Each visit is what it would have been
        alone. With ``split``, the visits not answered at the asking stage's
        cuts (``workers.scrape_seats``, ``workers.announcing``) go on apart:
        ``split(positions, finish)`` hands them over, ``finish(claim)`` settling
        them as this call does its own (their entries here are None). ``claim`` is asked once, when the
        batch settles (so a stop requested meanwhile is seen); the claim is made
        with the other runners' after the completion (``workers.claims``).
        Returns each visit, or the exception that ended it alone (its lease
        expires), and the new leases; raises ``StoreError`` when a step the
        batch shares fails (every lease expires). Each stage's time is counted
        in ``stages``, for every visit of the batch, and told to the observer
        (``workers.visit_stages``).
        """
        start = time.time()
        laps = Laps(sum(start - lease.claimed for lease in leases if lease.claimed) / len(leases))
        for lease in leases:
            self.ahead.visiting(lease.info_hash)
        plans = self._plans(leases, start)
        laps.lap("plan")
        # a stage no visit of the batch has is not counted for it (``workers.visit_stages``)
        asking = [i for i, p in enumerate(plans) if p.eligible or p.dht]
        answers: list = []
        if asking:
            answers, rest = self.asking.ask_batch([(leases[i].info_hash, plans[i].eligible, plans[i].dht)
                                                   for i in asking], laps, cut=split is not None)
            if rest is not None and split is not None:
                apart = [i for i, a in zip(asking, answers) if a is None]
                split(apart, partial(self._rest, [leases[i] for i in apart], [plans[i] for i in apart], start,
                                     rest, laps.copy()))
            laps.lap("announce")
        answered = [(i, a) for i, a in zip(asking, answers) if a is not None]
        skipped = [i for i, p in enumerate(plans) if not (p.eligible or p.dht)]
        return self._after(leases, plans, answered, skipped, start, claim, laps)

    def _rest(self, leases: list[Lease], plans: list[Plan], start: float, rest: Callable[[], list], laps: Laps,
              claim: Callable[[int], int] | None = None) -> tuple[list[Visit | Exception | None], list[Lease]]:
        """The visits a batch's cut left behind (``visit_many``'s ``split``), settled once answered."""
        answers = rest()
        laps.lap("announce")
        return self._after(leases, plans, list(enumerate(answers)), [], start, claim, laps)

    def _after(self, leases: list[Lease], plans: list[Plan], answered: list, skipped: list[int], start: float,
               claim: Callable[[int], int] | None, laps: Laps) -> tuple[list[Visit | Exception | None], list[Lease]]:
        """The batch's visits once asked (``answered``: position and answer) or skipped, each settled:
        notes, then a failure or the recording and completion, then the claim."""
        now = time.time()
        odd = {i: partial(self._skip, leases[i], plans[i], start) for i in skipped}
        settling = []
        for i, (results, mirrored) in answered:
            dht_next, note = notes_made(plans[i], results, now, mirrored, self.settings, self.dht is not None,
                                        self.queue.plans.note_args)
            if any(r.ok for r in results):
                settling.append((i, results, dht_next, note))
            else:  # its notes kept by a script of their own, then the failure (``Queue.fail``)
                odd[i] = partial(self._failed, leases[i], results, now, note)
        # the skipped and failed visits, each by calls of its own, while the others are recorded
        out: list = [None] * len(leases)
        apart: dict[int, gevent.Greenlet] = {}
        if len(odd) > 1:
            apart = {i: spawning.spawn(self._caught, job) for i, job in odd.items()}
        else:
            for i, job in odd.items():  # a lone one in this greenlet
                out[i] = self._caught(job)
        if answered:
            laps.lap("note")
        visits = len(answered) + len(skipped)
        n = self._settle(leases, plans, settling, now, (lambda: claim(visits)) if claim else None, laps, out)
        for i, g in apart.items():
            out[i] = g.get()
        return out, self._claim(n, laps, visits)

    def _plans(self, leases: list[Lease], start: float) -> list[Plan]:
        """What a visit of each of ``leases``'s torrents may ask at ``start``: one URL per tracker (its UDP
        and HTTP URLs are one swarm store), held while any of its URLs is inside its min interval, else
        asked at its preferred URL; and the DHT when its schedule says so. One round trip for the
        torrents scrape-ahead did not read for their lease (claimed ahead), none when it read them all."""
        got = [self.ahead.plan_read(lease.info_hash, lease.token) for lease in leases]
        missing = [lease.info_hash for lease, g in zip(leases, got) if g is None]
        read = iter(self.queue.plan_many(missing, self._defaults) if missing else [])
        out = []
        for g in got:
            urls, planned = next(read) if g is None else g
            out.append(plan_of(urls, planned, start, self.settings.one_ask_per_tracker,
                               self.trackers.health.backing_off_until, self.dht is not None))
        return out

    def _skip(self, lease: Lease, plan: Plan, start: float) -> Visit:
        """Nothing may be asked yet: back to cooling until the first source may be, score kept,
        neither a visit nor a failure."""
        times = plan.held_until + ([plan.noted.dht_not_before] if self.dht is not None else [])
        self.queue.defer(lease, max(min(times, default=start + self.settings.retry_seconds), start + 1))
        return Visit(lease.info_hash, "skipped", lease.score, 0, 0, 0, 0)

    def _failed(self, lease: Lease, results: list[SourceResult], now: float, note: list | None) -> Visit:
        """No source answered: its notes kept (``note``), then the failure kept on the torrent, score
        kept, retried later."""
        self.queue.plans.send(lease.info_hash, note)  # a failure is kept by another script (Queue.fail)
        error = failure_text(results)
        self.queue.fail(lease, error, now=now)
        network = not any(r.blocked or r.refused for r in results)
        for r in results:
            if r.blocked and r.source not in self._blocked and len(self._blocked) < NOTED_CAP:
                self._blocked.add(r.source)
                log.warning("tracker_refused_by_policy", tracker=redact.url(r.source), message=r.error)
        return Visit(lease.info_hash, "failed", lease.score, 0, 0, 0, len(results), error, network)

    @staticmethod
    def _caught(job: Callable[[], Visit]) -> Visit | Exception:
        try:
            return job()
        except Exception as e:  # noqa: BLE001 - the visit's own end, as a greenlet's would be
            return e

    def _settle(self, leases: list[Lease], plans: list[Plan], settling: list, now: float,
                claim: Callable[[], int] | None, laps: Laps, out: list) -> int:
        """Record the answered visits' peers, score each visit and complete it, its source notes
        (note.lua's arguments, or None) in the completion's step, then offer the peers to the name
        fetcher; each visit (or what ended it) into ``out``. Returns how many torrents to claim next."""
        # a torrent without notes was never visited (or not for two revisit intervals): the probe
        # would find no group record of it, so its peers go straight to record.lua; torrents.processed
        # with the recording, before the completion: a crash in between retries a visit already noted
        # this hour, which the recorder does not count twice
        done = []
        for i, results, dht_next, note in settling:
            h = leases[i].info_hash
            vr = VisitResult(h, tuple(results))
            done.append((i, vr, vr.distinct_ips, self._noting(h, now), dht_next, note))
        peered = [d for d in done if d[2]]
        news = self.recorder.record_many([(leases[i].info_hash, ips, now, plans[i].noted.last is not None, noting)
                                          for i, _, ips, noting, *_ in peered]) if peered else []
        new = dict(zip((d[0] for d in peered), news))
        quiet = [(leases[i].info_hash, now) for i, _, ips, noting, *_ in done if noting and not ips]
        if quiet:
            self.recorder.visited_many(quiet)
        if done:
            laps.lap("record")
        kept = []
        for i, vr, ips, noting, dht_next, note in done:
            if isinstance(new.get(i), Exception):
                out[i] = new[i]
                continue
            if noting and len(self._noted) < NOTED_CAP:
                self._noted.add(leases[i].info_hash)
            kept.append((i, vr, [r for r in vr.sources if r.ok], ips, dht_next, note))
        sizes = self._sizes([(leases[i].info_hash, vr, answered) for i, vr, answered, *_ in kept])
        if done:
            laps.lap("size")
        n = claim() if claim is not None else 0
        at = time.time()
        completions = [self._completion(leases[i], plans[i], answered, ips, new.get(i, 0), size, dht_next, note, now, at)
                       for (i, _, answered, ips, dht_next, note), size in zip(kept, sizes)]
        answers = self.completions.complete_many(completions) if completions else []
        laps.lap("complete")
        for (i, vr, answered, ips, *_), c, answer in zip(kept, completions, answers):
            if isinstance(answer, Exception):
                out[i] = answer
                continue
            # a name from its peers, if it has none (workers.metadata_names): where the plan read one, or a
            # fetch that succeeded, the peers are not offered (most visits, once a crawl has run)
            fetch_from = plans[i].fetch_from
            if self.names is not None and ips and fetch_from is not None and fetch_from <= now:
                self.names.offer(c.lease.info_hash, {p for r in answered for p in r.peers})
            state, score = answer
            out[i] = Visit(c.lease.info_hash, state, score, len(ips), c.new, len(answered), len(vr.sources))
        return n

    def _completion(self, lease: Lease, plan: Plan, answered: list[SourceResult], ips, new: int, size: tuple,
                    dht_next: float, note: list | None, now: float, sent: float) -> Completion:
        """An answered visit's completion: its outcome scored (contract §2), due again after the revisit
        interval or the first tracker's min interval or the DHT's next lookup, whichever is last."""
        s = self.settings
        counts = [SourceCount(max(r.returned or 0, len(r.peers)), r.max_peers) for r in answered]
        o = outcome(len(ips), new, counts, s.new_fraction)
        times = [max(plan.noted.not_before.get(u, 0.0) for u in g) for g in plan.groups]
        times += [dht_next] if self.dht is not None else []
        due = max(now + s.revisit_seconds, min(times)) if times else now + s.revisit_seconds
        seeders, leechers, reported, estimated = size
        return Completion(lease, o, now, len(ips), seeders, leechers, due, reported, new, estimated, note, sent)

    def _sizes(self, visits: list[tuple[str, VisitResult, list[SourceResult]]]) -> list[tuple]:
        """``_size`` of each of ``visits``: the sources' counts, or, for a swarm only the DHT knows, a
        BEP 33 scrape, each in a greenlet of its own when the batch has several."""
        out: list = [(vr.seeders, vr.leechers, vr.reported, False) for _, vr, _ in visits]
        scraped = [i for i, (_, vr, answered) in enumerate(visits) if self._dht_only(vr, answered)]
        jobs = {i: spawning.spawn(self._size, visits[i][0], out[i]) for i in scraped} if len(scraped) > 1 else {}
        for i in scraped:
            out[i] = jobs[i].get() if jobs else self._size(visits[i][0], out[i])
        return out

    def _dht_only(self, vr: VisitResult, answered: list[SourceResult]) -> bool:
        """A swarm no source reported a size of, with peers from the DHT: its size is the nodes' (BEP 33)."""
        return self.sizes is not None and vr.reported is None and any(r.source == "dht" and r.peers for r in answered)

    def _size(self, h: str, counted: tuple) -> tuple:
        """(seeders, leechers, reported, estimated) of a swarm only the DHT knows: from the nodes' bloom
        filters (BEP 33), else ``counted`` (the sources' counts)."""
        gevent.sleep(self.dht_budget.wait())  # a scrape takes a place as a lookup does
        size = self.sizes.size(h)
        if size is None:
            return counted
        return size.seeders, size.leechers, size.seeders + size.leechers, True

    def _claim(self, n: int, laps: Laps, visits: int) -> list[Lease]:
        """The next ``n`` leases; the batch's laps end here and are counted for each of its ``visits``."""
        leases = self.claims.claim(n)
        laps.lap("next")
        times = laps.whole()
        self.stages.add(times, visits)
        self.observer.visit_stages(times, visits)
        return leases

    def _noting(self, h: str, now: float) -> bool:
        """Whether this visit is noted for ``torrents.processed`` (``Recorder.visited``): once per torrent and
        clock hour from this process (the caller remembers it once noted).

        The recorder counts a torrent at most once per UTC clock hour; a
        second note in the same hour can only answer "already counted", so
        this process skips it (revisits inside the hour).
        """
        hour = int(now) // 3600
        if hour != self._hour:
            self._hour, self._noted = hour, set()
        return h not in self._noted
