"""Scrape ahead: the torrents a worker is about to visit, scraped per tracker in full requests before their visits.

Strategy. Two sources say which torrents this worker visits next, exactly:
the torrents it claimed ahead (``workers.claims``: a claim leases up to half
a horizon of this process's visits more than its runners asked for, ``want``,
and holds them),
and the cooling torrents that fall due within the horizon (in due order, as
claims will take them). A greenlet of the worker process (``_run``, while
visits go on or torrents are held) reads the trackers and notes of each new one (``plan.lua``, in
shared round trips; a torrent claimed ahead keeps what was read for its visit, ``plan_read``) and puts the torrent, for each tracker a visit at its
due time would ask (``asked``: the rule the visit itself applies), on that
tracker's *pending* list. A list holding a full request's worth (74
info-hashes for UDP, BEP 15's most; 64 for HTTP) is scraped at once in one
request (``ScrapeGroups``) and the seats are kept: each of those torrents'
visits takes its seat (``seat``) and reads an answer already there instead of
asking. A visit without a seat asks for its own, and the tracker's pending
torrents ride in that request, as many as fit. So a request carries a full
load whenever that many torrents naming the tracker are held or due within
the horizon, whatever the pool's size, and no visit waits for others to
join (a visit with no seat ahead still forms a group as before; one that
arrives while a peek is under way waits for it, ``PEEK_WAIT`` at most, so the
first visits of a worker take the riders that peek brings).

Why claimed ahead as well as peeked: in a backlog (a first pass, every
torrent due) which torrents the next claims take depends on scores and
ties that only the claim resolves, so only a lease says for sure; once
visits keep pace, torrents come due one by one, in due order, and the due
times say it. A peek of the backlog would scrape torrents other claims never
reach in time, each one request more.

The horizon is ``PEERCRAWL_SCRAPE_AHEAD_SECONDS`` (default 30), at most half
the revisit interval: a seat older than that is not used, so a count a visit
reads is at most that old. Only "empty" can be stale (a visit announces
wherever the count says peers), and an empty swarm seconds ago is what a
visit seconds earlier would have seen. At most half the revisit interval, so
a torrent is never scraped for its next visit before its last one ended.

What holds. A peek reads and writes nothing; the seats live in this process;
what is claimed ahead is leased, so it is handed back at a stop
(``close``, called when the process closes its ``Trackers``), handed back
rather than out once held a third of the lease time (``Claims.stale``: the
worker extends only its runners' leases), and comes back by itself when a
killed worker's leases expire. A seat answers only the torrent it was taken for (keyed by
tracker and torrent), once. Each request scraped ahead takes its place in
the announce cap as a visit's does; a tracker that backs off or cannot
scrape is not scraped ahead, nor a tracker held by its min interval for that
torrent. A failed request is one failure of the tracker (``TrackerScrapes``),
and its visits ask again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent
import redis
from gevent.event import Event

from crawler import logs, spawning
from crawler.errors import StoreError
from crawler.queue.visit_plan import Planned
from crawler.sources.result import SourceResult
from crawler.sources.trackers.scrape_groups import Seat
from crawler.sources.trackers.tracker_urls import by_tracker, preferred

if TYPE_CHECKING:
    from workers.claims import Claims

log = logs.get("worker.scrape_ahead")

# Seconds between peeks while visits go on (at once when a claim brought torrents to hold).
TICK = 1.0
# Torrents held claimed ahead at most (one claim's worth).
MAX_AHEAD = 2000
# Seconds of visits the pace is measured over; a pace over less than PACE_LEAST seconds is taken
# over PACE_LEAST (a worker's first visits start together: its pool, claimed at once).
PACE_WINDOW, PACE_LEAST = 10.0, 0.5
# Torrents whose plans one round trip of a peek reads.
PLAN_CALLS = 128
# The longest a visit with no seat waits for a peek under way (which may bring riders).
PEEK_WAIT = 1.0


def asked(urls: list[str], not_before: dict[str, float], at: float, one_ask: bool,
          backing_off_until: Callable[[str], float | None]) -> tuple[list[list[str]], list[float], list[str], dict]:
    """Which of a torrent's trackers a visit at ``at`` (unix time) asks.

    Returns (its trackers' groups, each group's held-until time, the URL
    asked of each group not held, other URL -> the one asked for it). URLs
    of one tracker (``tracker_urls.by_tracker``, when ``one_ask``) are held
    while any is inside its min interval and asked once, at the preferred URL.
    """
    groups = by_tracker(urls) if one_ask else [[u] for u in urls]
    held = [max(not_before.get(u, 0.0) for u in g) for g in groups]
    eligible: list[str] = []
    same: dict[str, str] = {}
    for g, until in zip(groups, held):
        if until <= at:
            eligible.append(preferred(g, backing_off_until))
            same.update((u, eligible[-1]) for u in g if u != eligible[-1])
    return groups, held, eligible, same


class ScrapeAhead:
    """The scrapes asked ahead of one worker process's visits (module note).

    ``queue``: the worker's ``Queue``; ``trackers``: its ``Trackers``;
    ``place(url)``: what takes one scrape request's place in the announce
    cap (seconds to wait); ``defaults``: the configured trackers every
    torrent names. ``claims`` (set by whoever builds the ``Claims``): where
    torrents are claimed ahead. ``enabled`` is False with scrape first off or
    a horizon of 0: ``seat`` then only asks the tracker and nothing is claimed
    ahead. Figures: ``peeks``, ``ahead`` (seats taken ahead), ``used`` (of
    them, taken by visits).
    """

    def __init__(self, queue, trackers, settings, place: Callable[[str], Callable[[], float]],
                 defaults: tuple[str, ...]):
        self.queue, self.trackers, self.settings, self.place, self.defaults = queue, trackers, settings, place, defaults
        self.horizon = min(settings.scrape_ahead_seconds, settings.revisit_seconds / 2)
        self.enabled = bool(settings.scrape_first and self.horizon > 0)
        self.claims: Claims | None = None
        # tracker URL -> {info-hash: unix time its visit is due}, torrents waiting for a request to ride in
        self.pending: dict[str, dict[str, float]] = {}
        # (tracker URL, info-hash) -> its seat in a request asked ahead
        self.seats: dict[tuple[str, str], Seat] = {}
        # info-hash -> (unix time its entry lapses, the URLs it is pending or seated at): not read again
        self.known: dict[str, tuple[float, tuple[str, ...]]] = {}
        self._new: list[tuple[str, int]] = []  # claimed ahead, not yet read: (info-hash, lease token)
        # info-hash -> (lease token, trackers a visit asks, its plan): the plans read for the torrents
        # claimed ahead, each taken by the visit of that lease (``plan_read``)
        self.plans_read: dict[str, tuple[int, list[str], Planned]] = {}
        self._visits: deque[float] = deque()
        self._visited: set[str] = set()  # visits begun since the peek under way began
        self._loop: gevent.Greenlet | None = None
        self._more, self._idle = Event(), Event()
        self._idle.set()  # no peek under way
        self.peeks = self.ahead = self.used = 0
        if self.enabled and hasattr(trackers, "on_close"):
            trackers.on_close.append(self.close)

    # --- what the claims and the visits tell it -------------------------------------
    def want(self) -> int:
        """How many torrents to hold claimed ahead: what this process visits in half of the horizon (or
        of the longest a lease may be held, if shorter), at most ``MAX_AHEAD``."""
        if not self.enabled or self.claims is None:
            return 0
        span = time.monotonic() - self._visits[0] if self._visits else PACE_WINDOW
        pace = len(self._visits) / min(max(span, PACE_LEAST), PACE_WINDOW)
        return int(min(pace * min(self.horizon, self.claims.stale) / 2, MAX_AHEAD))

    def held(self, leases) -> None:
        """``leases`` were claimed ahead: read and scrape them at once."""
        self._new += [(lease.info_hash, lease.token) for lease in leases]
        self._wake()

    def plan_read(self, h: str, token: int) -> tuple[list[str], Planned] | None:
        """The trackers a visit of ``h`` asks (the defaults, then its own) and its plan, read for the
        lease ``token`` after it was claimed ahead (what ``Queue.plan`` would answer its visit now:
        only a visit holding the lease writes the notes), taken once; None when none was read for
        that lease."""
        got = self.plans_read.pop(h, None)
        return (got[1], got[2]) if got is not None and got[0] == token else None

    def visiting(self, h: str) -> None:
        """A visit of ``h`` begins: what was pending for it is its own to ask, and peeks go on."""
        if not self.enabled:
            return
        now = time.monotonic()
        self._visits.append(now)
        while self._visits[0] < now - PACE_WINDOW:
            self._visits.popleft()
        self._visited.add(h)
        for u in self.known.pop(h, (0.0, ()))[1]:
            self.pending.get(u, {}).pop(h, None)
        self._wake()

    def _wake(self) -> None:
        if self._loop is None or self._loop.dead:
            self._idle.clear()  # a visit arriving before the first peek waits for it
            self._loop = spawning.spawn(self._run)
        elif self._new:
            self._more.set()

    def seat(self, url: str, h: str, patience: float) -> Seat | SourceResult | None:
        """``h``'s seat in ``url``'s scrape: the one taken ahead when there is a fresh one, else its own
        (``Trackers.scrape_seat``), with ``url``'s pending torrents riding in that request. A
        ``SourceResult``: the tracker backs off; None: not scraped (announce). Raises ``StoreError``."""
        if self.enabled:
            if (url, h) not in self.seats and not self._idle.is_set():
                self._idle.wait(PEEK_WAIT)  # a peek under way: its riders join this visit's request
            seat = self.seats.pop((url, h), None)
            if seat is not None and not seat.failed() and time.monotonic() - seat.send_at <= self.horizon:
                self.used += 1
                return seat
        got = self.trackers.scrape_seat(url, h, patience, self.place(url))
        if self.enabled and isinstance(got, Seat) and self.pending.get(url):
            groups = self.trackers.scrapes.groups
            self._seat(url, lambda: 0 < groups.forming(url) < groups.full(url))
        return got

    def _seat(self, url: str, go_on: Callable[[], bool]) -> None:
        """Seats for ``url``'s pending torrents, soonest due first, in ``url``'s next request, while ``go_on()``."""
        pend = self.pending.get(url, {})
        if self.trackers.health.backing_off_until(url) is not None:
            pend.clear()  # their visits see the backoff themselves
            return
        for h in sorted(pend, key=pend.__getitem__):
            if not go_on():
                return
            if pend.pop(h, None) is None:  # seated meanwhile (a seat may wait for its place in the cap)
                continue
            got = self.trackers.scrapes.seat(url, bytes.fromhex(h), self.settings.visit_deadline, self.place(url))
            if got is None:  # the tracker does not scrape (now learned): its visits announce
                pend.clear()
                return
            self.seats[(url, h)] = got
            self.ahead += 1

    # --- the peeks ------------------------------------------------------------------
    def _run(self) -> None:
        """Peek while visits go on or torrents are held: every ``TICK``, at once when more were claimed."""
        try:
            while not getattr(self.trackers, "closed", False) and (
                    self._new or (self.claims is not None and self.claims.held)
                    or (self._visits and self._visits[-1] > time.monotonic() - max(self.horizon, 2 * TICK))):
                self._more.clear()
                self._idle.clear()
                try:
                    self.peek()
                except (StoreError, redis.RedisError) as e:  # Redis away: the visits ask on their own meanwhile
                    log.debug("scrape_ahead_failed", error=str(e))
                finally:
                    self._idle.set()
                self._more.wait(TICK)
        finally:
            self._idle.set()

    def peek(self) -> None:
        """Read the torrents claimed ahead and those due within the horizon, put each new one on its
        trackers' pending lists, and scrape each list that fills a request. Raises ``StoreError`` /
        ``redis.RedisError``."""
        self.peeks += 1
        now = time.time()
        self._forget(now)
        if self.claims is not None:
            self.claims.drop_stale()
            self.claims.refill()  # what it claims comes back through held()
        self._visited = set()
        tokens = dict(self._new)
        new, self._new = [(h, now) for h, _ in self._new], []
        due = new + [(h, at) for h, at in self._due(now) if h not in self.known]
        due = list(dict(due).items())
        plans = self._plans([h for h, _ in due])
        s, health = self.settings, self.trackers.health
        for (h, at), (urls, planned) in zip(due, plans):
            if h in self._visited:  # its visit began meanwhile and asks for itself
                continue
            if h in tokens:  # claimed ahead: its visit takes this plan rather than reading it again
                self.plans_read[h] = (tokens[h], urls, planned)
            noted = planned.notes
            *_, eligible, _ = asked(urls, noted.not_before, at, s.one_ask_per_tracker, health.backing_off_until)
            eligible = [u for u in eligible if health.no_scrape_until(u) is None]
            for u in eligible:
                self.pending.setdefault(u, {})[h] = at
            self.known[h] = (max(at, now) + self.horizon, tuple(eligible))
        groups = self.trackers.scrapes.groups
        for url in list(self.pending):
            pend = self.pending[url]
            while pend and len(pend) >= groups.full(url) - groups.forming(url):
                # exactly the room of the request forming (or of a new one): it goes out full
                stop = len(pend) - (groups.full(url) - groups.forming(url))

                def go_on(pend: dict = pend, stop: int = stop) -> bool:
                    return len(pend) > stop

                self._seat(url, go_on)

    def _due(self, now: float) -> list[tuple[str, float]]:
        """The cooling torrents due after now and within the horizon, soonest first, at most
        ``MAX_AHEAD`` (every shard, one pipelined read), each with its due time."""
        shards = self.queue.keys.all_shards
        p = self.queue.client.pipeline(transaction=False)
        for k in shards:
            p.zrangebyscore(k.cooling, f"({now!r}", now + self.horizon, start=0, num=MAX_AHEAD, withscores=True)
        due = sorted(((h.decode(), float(t)) for part in p.execute() for h, t in part), key=lambda x: x[1])
        return due[:MAX_AHEAD]

    def _plans(self, hashes: list[str]) -> list[tuple[list[str], Planned]]:
        """Each torrent's trackers a visit asks (the defaults, then its own) and its plan as
        ``Queue.plan`` reads it, ``PLAN_CALLS`` torrents to a round trip (``VisitPlan.plans``)."""
        plans = self.queue.plans
        return [got for start in range(0, len(hashes), PLAN_CALLS)
                for got in plans.with_trackers(hashes[start:start + PLAN_CALLS], self.defaults)]

    def _forget(self, now: float) -> None:
        """Drop what aged out: entries past their horizon with their pending places, seats too old to use."""
        for h in [h for h, (until, _) in self.known.items() if until < now]:
            for u in self.known.pop(h)[1]:
                self.pending.get(u, {}).pop(h, None)
        oldest = time.monotonic() - self.horizon
        for key in [key for key, seat in self.seats.items() if seat.send_at < oldest]:
            del self.seats[key]
        for u in [u for u, pend in self.pending.items() if not pend]:
            del self.pending[u]
        for h in [h for h in self.plans_read if h not in self.known]:  # its lease went back unvisited
            del self.plans_read[h]

    def close(self) -> None:
        """Hand back what is claimed ahead (the worker stops)."""
        if self.claims is not None:
            self.claims.release_held()
