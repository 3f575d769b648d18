"""Scrapes of one tracker, grouped so a packet (or an HTTP request) asks for many torrents.

Every scrape of one tracker URL that greenlets ask for while a group for that
URL is forming goes out together: a UDP tracker's in packets of up to 74
info-hashes (BEP 15), an HTTP tracker's in requests of up to 64
(``http_scrape.MAX_HASHES``), from one greenlet. Each caller gets its
torrent's counts, None when the tracker left it out, or the exception of the
exchange that should have answered it.

A torrent takes a ``Seat`` in the forming group (``seat``), which opens one
when none is forming or the forming one is full. Opening a group takes its
request's place in the announce cap (``place()``: seconds to wait; 0 with
no cap), so a scrape counts against the cap like an announce, once per
request however many torrents it carries. The seat tells its visit how long
that wait is, so the visit's deadline starts after it, as it does for its
announces. The group forms meanwhile, and after its wait while scrapes keep
joining: it is sent once ``QUIET`` seconds pass with no new one, once it holds
``full`` torrents, or ``WINDOW`` seconds after its wait at most. Visits reach
their trackers a few milliseconds apart (each reads tracker health first), so
a group sent after one turn of the event loop would be a packet per handful
of them; a fixed wait would add its whole length to every visit of an idle
worker. A group's exchange is bounded by the least ``patience`` of its seats,
counted from when it is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
from gevent.event import AsyncResult, Event

from crawler import spawning
from crawler.errors import StoreError

WINDOW = 0.02
QUIET = 0.002


class Seat:
    """One torrent's place in a group: ``send_at``, when (``time.monotonic()``) the group's request
    may go, and ``wait``, the seconds left until then; ``get()``: its counts, None (left out), or
    raises what failed it."""

    __slots__ = ("send_at", "_done")

    def __init__(self, send_at: float, done: AsyncResult):
        self.send_at, self._done = send_at, done

    @property
    def wait(self) -> float:
        """Seconds from now before the group's request may go (0 once it may)."""
        return max(self.send_at - time.monotonic(), 0.0)

    def ready(self) -> bool:
        """True once the exchange that should have answered the seat is over (``get`` does not wait)."""
        return self._done.ready()

    @property
    def event(self) -> AsyncResult:
        """What to wait on (``gevent.wait``) for the seat's exchange to be over."""
        return self._done

    def failed(self) -> bool:
        """True once the exchange that should have answered the seat failed."""
        return self._done.ready() and not self._done.successful()

    def get(self):
        """The seat's answer, once its group's exchange is over (see the class note)."""
        return self._done.get()

    def counts(self):
        """The seat's counts once answered, else None (left out, failed, or not answered yet)."""
        return self._done.value if self._done.ready() and self._done.successful() else None


class _Group:
    __slots__ = ("members", "full", "placed", "send_at", "error")

    def __init__(self):
        self.members: list[tuple[bytes, float, AsyncResult]] = []
        self.full, self.placed = Event(), Event()
        self.send_at = 0.0
        self.error: BaseException | None = None


class ScrapeGroups:
    """The groups of scrapes forming, one per tracker URL, of one ``Trackers``.

    ``scrape_many(url, info_hashes, deadline)`` scrapes one group and returns,
    per hash in order, its ``ScrapeCounts``, None (left out of the reply), or
    the exception that failed it; it raises only ``StoreError``. ``full(url)``:
    the torrents that fill one request to ``url``; ``window``: how long a
    group forms at most, ``quiet``: the pause in joins that ends it.
    ``groups``: groups scraped (figures for tests and the benchmark).
    """

    def __init__(self, scrape_many, full=lambda url: 74, window: float = WINDOW, quiet: float = QUIET):
        self._scrape_many, self.full, self.window, self.quiet = scrape_many, full, window, quiet
        self._forming: dict[str, _Group] = {}
        self.groups = 0

    def seat(self, url: str, info_hash: bytes, patience: float, place: Callable[[], float] = lambda: 0.0) -> Seat:
        """A seat for ``info_hash`` in ``url``'s forming group, opening one (and taking its ``place()``)
        when none has room. Raises ``StoreError`` when the place could not be taken."""
        g = self._forming.get(url)
        opener = g is None
        if g is None:
            g = self._forming[url] = _Group()
        done: AsyncResult = AsyncResult()
        g.members.append((info_hash, patience, done))
        if len(g.members) >= self.full(url):
            g.full.set()
            if self._forming.get(url) is g:
                del self._forming[url]  # the next scrape opens a group of its own
        if opener:
            try:
                g.send_at = time.monotonic() + place()
            except BaseException as e:
                g.error = e
                if self._forming.get(url) is g:
                    del self._forming[url]
                raise
            finally:
                g.placed.set()
            spawning.spawn(self._scrape_forming, url, g)
        else:
            g.placed.wait()
            if g.error is not None:
                raise g.error if isinstance(g.error, StoreError) else StoreError(f"scrape place: {g.error!r}")
        return Seat(g.send_at, done)

    def forming(self, url: str) -> int:
        """The seats taken in ``url``'s forming group (0: none forming; a new seat opens one)."""
        g = self._forming.get(url)
        return 0 if g is None else len(g.members)

    def _scrape_forming(self, url: str, g: _Group) -> None:
        gevent.sleep(max(g.send_at - time.monotonic(), 0.0))  # its place in the cap; scrapes keep joining
        end, seen = time.monotonic() + self.window, 0
        while len(g.members) > seen and not g.full.is_set() and time.monotonic() < end:
            seen = len(g.members)
            g.full.wait(min(self.quiet, max(end - time.monotonic(), 0.0)))
        if self._forming.get(url) is g:
            del self._forming[url]
        self.groups += 1
        members = list(g.members)
        hashes = list(dict.fromkeys(h for h, _, _ in members))
        deadline = time.monotonic() + min(p for _, p, _ in members)
        try:
            answers = dict(zip(hashes, self._scrape_many(url, hashes, deadline)))
        except BaseException as e:
            for *_, done in members:
                done.set_exception(e if isinstance(e, StoreError) else StoreError(f"scraping stopped: {e!r}"))
            if not isinstance(e, Exception):
                raise
            return
        for h, _, done in members:
            answer = answers.get(h)
            if isinstance(answer, BaseException):
                done.set_exception(answer)
            else:
                done.set(answer)
