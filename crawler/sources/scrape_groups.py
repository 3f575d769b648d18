"""Scrapes of one tracker, grouped so a packet (or an HTTP request) asks for many torrents.

Every scrape of one tracker URL that greenlets ask for while a group for that
URL is forming (one turn of the event loop) goes out together: a UDP
tracker's in packets of up to 74 info-hashes (BEP 15), an HTTP tracker's in
requests of up to 64 (``http_scrape.MAX_HASHES``), from one greenlet. Each
caller gets its torrent's counts, None when the tracker left it out, or the
exception of the exchange that should have answered it. A group is asked
until the earliest of its callers' deadlines.

A group forms while scrapes keep joining it: it is sent once ``QUIET``
seconds pass with no new one, once it holds ``full`` torrents, or after
``WINDOW`` seconds at most. Visits reach their trackers a few milliseconds
apart (each reads tracker health first), so a group sent after one turn of
the event loop would be a packet per handful of them; a fixed wait would
add its whole length to every visit of an idle worker.
"""

from __future__ import annotations

import time

import gevent
from gevent.event import AsyncResult, Event

from crawler.errors import StoreError

WINDOW = 0.02
QUIET = 0.002


class ScrapeGroups:
    """The groups of scrapes forming, one per tracker URL, of one ``Trackers``.

    ``scrape_many(url, info_hashes, deadline)`` scrapes one group and returns,
    per hash in order, its ``ScrapeCounts``, None (left out of the reply), or
    the exception that failed it; it raises only ``StoreError``. ``full(url)``:
    the torrents that fill one request to ``url``; ``window``: how long a
    group forms at most, ``quiet``: the pause in joins that ends it. ``groups``: groups scraped (figures for tests and
    the benchmark).
    """

    def __init__(self, scrape_many, full=lambda url: 74, window: float = WINDOW, quiet: float = QUIET):
        self._scrape_many, self._full, self.window, self.quiet = scrape_many, full, window, quiet
        self._forming: dict[str, tuple[list, Event]] = {}
        self.groups = 0

    def join(self, url: str, info_hash: bytes, deadline: float):
        """The counts of one torrent at ``url`` (None: left out), scraped with every scrape of ``url``
        asked meanwhile; raises the exception of the exchange that failed it."""
        forming = self._forming.get(url)
        if forming is None:
            forming = self._forming[url] = ([], Event())
            gevent.spawn(self._scrape_forming, url, forming)
        group, full = forming
        done = AsyncResult()
        group.append((info_hash, deadline, done))
        if len(group) >= self._full(url):
            full.set()
        return done.get()

    def _scrape_forming(self, url: str, forming: tuple[list, Event]) -> None:
        group, full = forming
        end, seen = time.monotonic() + self.window, 0
        while len(group) > seen and not full.is_set() and time.monotonic() < end:
            seen = len(group)
            full.wait(min(self.quiet, max(end - time.monotonic(), 0.0)))
        if self._forming.get(url) is forming:
            del self._forming[url]
        self.groups += 1
        hashes = list(dict.fromkeys(h for h, _, _ in group))
        try:
            answers = dict(zip(hashes, self._scrape_many(url, hashes, min(d for _, d, _ in group))))
        except BaseException as e:
            for *_, done in group:
                done.set_exception(e if isinstance(e, StoreError) else StoreError(f"scraping stopped: {e!r}"))
            if not isinstance(e, Exception):
                raise
            return
        for h, _, done in group:
            answer = answers.get(h)
            if isinstance(answer, BaseException):
                done.set_exception(answer)
            else:
                done.set(answer)
