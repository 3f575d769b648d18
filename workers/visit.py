"""One visit of one claimed torrent, end to end (contract §1–§4).

Strategy: one round trip reads the torrent's own trackers and its source
notes (``crawler.queue.source_notes``: when each tracker may be announced
to again, when the DHT is next due), or none when scrape-ahead read them
after the torrent was claimed ahead (``ScrapeAhead.plan_read``). URLs of one tracker (one host, port
and path: ``tracker_urls.by_tracker``) are asked once, at the preferred URL,
and held together. Then the asking stage (``workers.asking``): trackers
are scraped first, most often in a request asked ahead of the visit (the
ones that report the swarm empty, or fail, settle it without an announce);
a tracker learned to mirror another is not announced to while their scrapes
agree; the rest and the DHT, when due (``crawler.sources.dht.dht_schedule``),
are asked at once, each at its place in the announce cap or DHT budget,
under one deadline that starts after those waits. Then, in this order:

1. the visit's notes are made (``VisitPlan.note_args``), to be kept in one
   step: per tracker, now + its ``min interval`` (HTTP trackers), else now +
   ``tracker_floor`` (default 0: BEP 15 replies carry no min interval, and
   the revisit interval, 1800 s by default, already spaces announces); the
   DHT's schedule; what each source did on this visit (``torrent`` shows it);
   none when they are what the plan read and live long enough as they are;
2. no source answered: the notes are kept, then ``Queue.fail`` (score kept,
   short retry; contract §1);
3. otherwise the peers are recorded (§4) *before* the completion, so a crash
   between the two leaves a lease that expires and a retry that counts only
   what was not yet counted; the score is then applied once (§2) by
   ``Queue.complete`` on the sources asked (a skipped DHT is not one), the
   notes written first in its step (a visit a crash ends before then keeps
   no notes: its retry may ask a tracker inside its min interval once); and
   when the pool wants the greenlet's next torrent it is claimed
   with the other runners' next claims (``workers.claims``).

A torrent whose trackers are all still inside their min interval and whose
DHT lookup is not due is not asked at all: ``Queue.defer`` puts it back to
cooling until the first of them may be asked again (``Visit.skipped``), which
is neither a visit nor a failure.

Redis steps of a visit: the plan, the recording (its batch's probe and
record calls, then ``torrents.processed`` for the batch's visits, once per
torrent and hour: skipped for a revisit inside the hour), the completion
with the notes, the next claim (one claim for the runners asking together);
each shares its round trip with other visits' steps (``crawler.store.coalesce``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import gevent

from crawler import logs, redact
from crawler.keys import Keys
from crawler.observer import QUIET, Observer
from crawler.queue import source_notes as notes
from crawler.queue.queue import Completion, Lease, Queue
from crawler.queue.scoring import SourceCount, outcome
from crawler.settings import Settings
from crawler.sources.dht import dht_schedule
from crawler.sources.rate_budget import RateBudget
from crawler.sources.result import SourceResult, VisitResult
from crawler.store import patience
from crawler.store.outage import Outage
from workers.asking import Asking
from workers.claims import Claims
from workers.completions import Completions
from workers.scrape_ahead import ScrapeAhead, asked
from workers.visit_stages import Laps, StageTimes

log = logs.get("worker.visit")

# Not-before entries outlive the longest min interval a tracker may ask for.
MIN_INTERVAL_CAP = 6 * 3600.0
# Revisit intervals a torrent's source notes are written to live past what a visit needs of them
# (``Visitor._note``): a write every ~(1 + this) revisits while nothing in them changes.
NOTES_SLACK = 2
# Torrents remembered as noted for torrents.processed in the current hour:
# bounded memory (~100 bytes each); past it, visits just ask the recorder.
NOTED_CAP = 200_000


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
    # A failed visit whose sources all went unanswered: what an outage looks like. One that a
    # tracker refused, or the address policy, says nothing about the network.
    network: bool = True


class Plan(NamedTuple):
    """What a visit may ask: every tracker URL of the torrent and its source notes; the trackers by
    group (one per tracker), when the held ones may be asked again, the URL to ask of each eligible
    one and the URLs it stands for (``same``); whether the DHT is due; from when the torrent's
    metadata may be fetched (None: never); and the notes as stored, with when they expire
    (``Planned``)."""

    urls: list[str]
    noted: notes.SourceNotes
    groups: list
    held_until: list[float]
    eligible: list[str]
    same: dict[str, str]
    dht: bool
    fetch_from: float | None
    raw_notes: dict[str, str]
    notes_until: float


class Visitor:
    """Visits claimed torrents; one per worker process, shared by its greenlets.

    ``trackers``: a ``crawler.sources.trackers.trackers.Trackers``; ``dht``: a
    ``DhtSource`` or None; ``recorder``: a ``crawler.counters.Recorder``, or the worker's
    ``crawler.counters.batcher.Batcher`` around it (recordings made together).
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
        self.trackers, self.recorder, self.dht, self.sizes, self.names = trackers, recorder, dht, sizes, names
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
        Each stage's time is counted in ``stages`` and told to the observer
        (``workers.visit_stages``).
        """
        h, start = lease.info_hash, time.time()
        laps = Laps(start - lease.claimed if lease.claimed else 0.0)
        self.ahead.visiting(h)
        plan = self._plan(lease, start)
        laps.lap("plan")
        if not plan.eligible and not plan.dht:
            v = self._skip(lease, plan, start)
            laps.lap("complete")
            return v, self._claim(claim() if claim is not None else 0, laps)
        results, mirrored = self.asking.ask(h, plan.eligible, plan.dht, laps)  # scrape first, then announce
        laps.lap("announce")
        now = time.time()
        dht_next, note = self._note(h, plan, results, now, mirrored)
        if not any(r.ok for r in results):
            self.queue.plans.send(h, note)  # a failure is kept by another script (Queue.fail)
            laps.lap("note")
            v = self._failed(lease, results, now)
            laps.lap("complete")
            return v, self._claim(claim() if claim is not None else 0, laps)
        laps.lap("note")
        return self._settle(lease, plan, results, dht_next, now, claim, laps, note)

    def _plan(self, lease: Lease, start: float) -> Plan:
        """What a visit of ``lease``'s torrent may ask at ``start``: one URL per tracker (its UDP and HTTP
        URLs are one swarm store), held while any of its URLs is inside its min interval, else asked at
        its preferred URL; and the DHT when its schedule says so. One round trip, none when the torrent
        was claimed ahead and scrape-ahead read it for this lease."""
        h = lease.info_hash
        got = self.ahead.plan_read(h, lease.token)
        if got is None:
            planned = self.queue.plan(h)
            urls = notes.tracker_list(self._defaults, planned.own)
        else:
            urls, planned = got
        noted = planned.notes
        groups, held_until, eligible, same = asked(urls, noted.not_before, start, self.settings.one_ask_per_tracker,
                                                   self.trackers.health.backing_off_until)
        return Plan(urls, noted, groups, held_until, eligible, same,
                    self.dht is not None and noted.dht_not_before <= start, planned.fetch_from,
                    planned.raw_notes, planned.notes_until)

    def _skip(self, lease: Lease, plan: Plan, start: float) -> Visit:
        """Nothing may be asked yet: back to cooling until the first source may be, score kept,
        neither a visit nor a failure."""
        times = plan.held_until + ([plan.noted.dht_not_before] if self.dht is not None else [])
        self.queue.defer(lease, max(min(times, default=start + self.settings.retry_seconds), start + 1))
        return Visit(lease.info_hash, "skipped", lease.score, 0, 0, 0, 0)

    def _failed(self, lease: Lease, results: list[SourceResult], now: float) -> Visit:
        """No source answered: the failure kept on the torrent, score kept, retried later."""
        error = failure_text(results)
        self.queue.fail(lease, error, now=now)
        network = not any(r.blocked or r.refused for r in results)
        for r in results:
            if r.blocked and r.source not in self._blocked and len(self._blocked) < NOTED_CAP:
                self._blocked.add(r.source)
                log.warning("tracker_refused_by_policy", tracker=redact.url(r.source), message=r.error)
        return Visit(lease.info_hash, "failed", lease.score, 0, 0, 0, len(results), error, network)

    def _settle(self, lease: Lease, plan: Plan, results: list[SourceResult], dht_next: float, now: float,
                claim: Callable[[], int] | None, laps: Laps, note: list | None) -> tuple[Visit, list[Lease]]:
        """Record the peers, score the visit and complete it, its source notes (``note``: note.lua's
        arguments, or None) in the completion's step (the next claim after it), then offer the peers
        to the name fetcher."""
        h, s = lease.info_hash, self.settings
        answered = [r for r in results if r.ok]
        vr = VisitResult(h, tuple(results))
        ips = vr.distinct_ips
        # a torrent without notes was never visited (or not for two revisit intervals): the probe
        # would find no group record of it, so its peers go straight to record.lua; torrents.processed
        # with the recording, before the completion: a crash in between retries a visit already noted
        # this hour, which the recorder does not count twice
        noting = self._noting(h, now)
        if ips:
            new = self.recorder.record_visit(h, ips, now, probe=plan.noted.last is not None, processed=noting)
        else:
            new = 0
            if noting:
                self.recorder.visited(h, now)
        if noting and len(self._noted) < NOTED_CAP:
            self._noted.add(h)
        counts = [SourceCount(max(r.returned or 0, len(r.peers)), r.max_peers) for r in answered]
        o = outcome(len(ips), new, counts, s.new_fraction)
        # Not before the first tracker's min interval ends, or the DHT's next lookup.
        times = [max(plan.noted.not_before.get(u, 0.0) for u in g) for g in plan.groups]
        times += [dht_next] if self.dht is not None else []
        due = max(now + s.revisit_seconds, min(times)) if times else now + s.revisit_seconds
        laps.lap("record")
        seeders, leechers, reported, estimated = self._size(h, vr, answered)
        laps.lap("size")
        n = claim() if claim is not None else 0
        state, score = self.completions.complete(Completion(lease, o, now, len(ips), seeders, leechers, due, reported,
                                                           new, estimated, note, time.time()))
        laps.lap("complete")
        # a name from its peers, if it has none (workers.metadata_names): where the plan read one, or a
        # fetch that succeeded, the peers are not offered (most visits, once a crawl has run)
        if self.names is not None and ips and plan.fetch_from is not None and plan.fetch_from <= now:
            self.names.offer(h, {p for r in answered for p in r.peers})
        v = Visit(h, state, score, len(ips), new, len(answered), len(results))
        return v, self._claim(n, laps)

    def _size(self, h: str, vr: VisitResult, answered: list[SourceResult]) -> tuple:
        """(seeders, leechers, reported, estimated): the trackers' counts, or, for a swarm only the
        DHT knows, its size from the nodes' bloom filters (BEP 33)."""
        looked = next((r for r in answered if r.source == "dht"), None)
        if vr.reported is None and looked is not None and looked.peers and self.sizes is not None:
            gevent.sleep(self.dht_budget.wait())  # a scrape takes a place as a lookup does
            size = self.sizes.size(h)
            if size is not None:
                return size.seeders, size.leechers, size.seeders + size.leechers, True
        return vr.seeders, vr.leechers, vr.reported, False

    def _note(self, h: str, plan: Plan, results: list[SourceResult], now: float,
              mirrored: dict[str, str]) -> tuple[float, list | None]:
        """What this visit learned about ``h``'s sources (``crawler.queue.source_notes``): when the DHT
        is next due (0: next visit), and the arguments that keep it in one step (``VisitPlan.note_args``;
        None: nothing to keep), for the caller to send.

        ``plan.noted.not_before`` is updated in place with the trackers' new times."""
        urls, noted, same, dht = plan.urls, plan.noted, plan.same, plan.dht
        s = self.settings
        fresh = {r.source: self._not_before(r, now) for r in results if r.ok and r.source != "dht"}
        fresh = {u: t for u, t in fresh.items() if t > now}
        noted.not_before.update(fresh)
        fields = {u: repr(t) for u, t in fresh.items()}
        drop: tuple[str, ...] = ()
        looked = next((r for r in results if r.source == "dht"), None)
        dht_next = noted.dht_not_before
        if looked is not None and looked.ok:
            empty, dht_next = dht_schedule.after_lookup(bool(looked.peers), noted.dht_empty, now,
                                                        s.revisit_seconds, s.dht_empty_visits)
            if empty:
                fields[notes.DHT_EMPTY] = str(empty)
            if dht_next:
                fields[notes.DHT] = repr(dht_next)
            drop = tuple(f for f, keep in ((notes.DHT_EMPTY, empty), (notes.DHT, dht_next)) if not keep)
        codes = dict.fromkeys(same, "d") | dict.fromkeys(mirrored, "m") | {r.source: tracker_code(r) for r in results if r.source != "dht"}
        fields[notes.LAST] = notes.last(urls, codes, dht_code(self.dht is not None, dht, looked))
        # The notes live until the last time they hold has passed, and two revisit intervals at least;
        # written with two more, so the revisits that change nothing in them (most, where trackers
        # give no min interval) rewrite nothing until what is left falls short of that.
        held = [t - now for t in noted.not_before.values()] + [dht_next - now]
        life = max(held + [0.0]) + 2 * s.revisit_seconds
        raw = plan.raw_notes
        if plan.notes_until >= now + life and not any(f in raw for f in drop) \
                and all(raw.get(f) == v for f, v in fields.items()):
            return dht_next, None
        return dht_next, self.queue.plans.note_args(fields, drop, life + NOTES_SLACK * s.revisit_seconds)

    def _claim(self, n: int, laps: Laps) -> list[Lease]:
        """The next ``n`` leases; the visit's laps end here and are counted."""
        leases = self.claims.claim(n)
        laps.lap("next")
        times = laps.whole()
        self.stages.add(times)
        self.observer.visit_stages(times)
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



def failure_text(results: list[SourceResult], limit: int = 200) -> str:
    """Why a visit failed, in at most ``limit`` characters, as ``torrent`` shows it and Redis keeps it:
    the sources the address policy refused first (their message names the setting that allows them),
    then refusals, then the rest; tracker URLs redacted (their passkeys)."""
    ordered = sorted(results, key=lambda r: (not r.blocked, not r.refused))
    text = "; ".join(f"{redact.url(r.source)}: {redact.text(r.error or '', r.source)}" for r in ordered)
    if not text:
        return "no source to ask"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tracker_code(r: SourceResult) -> str:
    """One tracker's code in the visit's notes (``source_notes.TRACKER_CODES``)."""
    if r.asked == "backoff":
        return "b"
    if not r.ok:
        return "p" if r.blocked else "r" if r.refused else "f"
    return "s" if r.asked == "scrape" else "a"


def dht_code(has_dht: bool, due: bool, looked: SourceResult | None) -> str:
    """The DHT's code in the visit's notes (``source_notes.DHT_CODES``)."""
    if not has_dht:
        return "-"
    if not due:
        return "k"
    return "a" if looked is not None and looked.ok else "f"
