"""Scrape first: a tracker's counts for a torrent before anyone announces to it.

``TrackerScrapes.seat(url, info_hash, patience, place)`` and ``answer(url,
seat)`` are what ``Trackers`` asks before an announce. A tracker that reports the swarm empty (0 seeders,
0 leechers) is not announced to on that visit: its answer is "no peers from
this tracker" (contract §2), as an announce to an empty swarm would have
said, at a fraction of the requests (one scrape packet serves up to 74
torrents; an announce costs two requests per torrent, its withdrawal
included). Otherwise the caller announces as before.

- A scrape that fails (silence, garbage) raises: the tracker failed for
  that visit, never "no peers". One failed request is one failure
  (``on_failure``, once, however many torrents it carried: a lost packet of
  74 hashes must not count as 74 and back the tracker off), and
  ``SILENT_LIMIT`` failed requests in a row
  (a tracker that answers announces but drops scrapes looks like this)
  and it is learned as one that cannot scrape, and announced to; a tracker
  that is simply down then fails its announces and backs off as before.
- A tracker that cannot scrape (an announce URL without BEP 48's scrape
  form, a UDP error reply, an HTTP 4xx on the scrape URL or a reply there
  without BEP 48's ``files``) is learned as such
  for ``RELEARN_SECONDS``, in tracker health (so every worker knows it, and
  ``status`` shows it), and announced to as before: ``counts`` answers None.
- An HTTP tracker lists only the torrents it has figures for (BEP 48;
  opentracker and aquatic leave out every swarm they do not hold), so a
  torrent left out of a reply it read is empty there. It read the
  torrent's ``info_hash`` when the request asked for that torrent alone, or
  when the torrent stood at most ``reads`` deep in the request: the deepest
  place of an asked torrent in a reply that listed two asked torrents, or
  one neither first nor last. A tracker that reads one ``info_hash`` lists
  one torrent at most, the first asked or (a PHP tracker's ``$_GET``) the
  last; one that reads the first N (chihaya's 50, aquatic's 100) lists none
  past them. Any other left-out torrent is announced to (``answer`` None).
- A reply is read only when its keys are the hashes asked: a key that is
  neither an asked hash's 20 bytes nor their UTF-8 text (WebTorrent's
  ``bittorrent-tracker``; ``http_scrape.webtorrent_key``) shows a tracker
  whose silence says nothing. From such a reply on, every torrent that
  tracker leaves out is announced to, until a reply whose keys all are
  asked hashes (one at least) shows it readable again. Kept per process
  (``distrust``, an ``Lru``): the key that shows it comes in the reply it
  would misread, so no process reads that reply as empty (docs/sources.md).

Scrapes of one tracker asked together are grouped (``ScrapeGroups``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from crawler.sources.addresses import share_of_time
from crawler.sources.lru import Lru
from crawler.sources.request_counts import RequestCounts
from crawler.sources.trackers.health import TrackerHealth
from crawler.sources.trackers.http_client import HttpStatusError
from crawler.sources.trackers.http_scrape import MAX_HASHES as HTTP_HASHES
from crawler.sources.trackers.http_scrape import (
    ScrapeCounts,
    ScrapeFound,
    parse_scrape_reply,
    scrape_request,
    scrape_url,
)
from crawler.sources.trackers.scrape_groups import ScrapeGroups, Seat
from crawler.sources.trackers.tracker_errors import ScrapeUnsupported, TrackerRefused, TrackerTimeout
from crawler.sources.trackers.udp_client import UdpTrackerClient

# BEP 15: the info-hashes one UDP scrape packet may carry.
UDP_HASHES = 74
# A tracker learned not to scrape is tried again after this long (trackers
# are upgraded; one scrape a day per worker is nothing).
RELEARN_SECONDS = 86_400.0
# An HTTP tracker's answer for a torrent it lists no figures for.
EMPTY = ScrapeCounts(0, 0, 0)
# Failed scrapes in a row after which a tracker is taken as one that drops scrapes.
SILENT_LIMIT = 3


class TrackerScrapes:
    """Scrapes of one worker process's trackers (one per ``Trackers``).

    ``udp``: the process's UDP client; ``udp_targets(url)``: the (family,
    address) pairs of a UDP tracker URL, checked by the address policy, the
    one that answered last first;
    ``http_body(url, until)``: the body of a 200 GET, bounded (raising what
    ``http_get`` raises); ``on_failure(url, exception)``: told once per
    failed request (the tracker's health); ``requests``: the process's
    ``RequestCounts``, told of each HTTP scrape (the UDP client tells it of
    its datagrams). Figures: ``udp_packets``, ``http_requests``.
    """

    def __init__(self, enabled: bool, udp: UdpTrackerClient, udp_targets: Callable, http_body: Callable,
                 health: TrackerHealth, cache_size: int, on_failure: Callable[[str, Exception], None],
                 requests: RequestCounts):
        self.enabled, self.health, self.on_failure, self.requests = enabled, health, on_failure, requests
        self.udp, self.udp_targets, self.http_body = udp, udp_targets, http_body
        self.groups = ScrapeGroups(self._scrape_many, full=self._per_request)
        # tracker URL -> its failed scrape requests in a row
        self.failed: Lru[str, int] = Lru(cache_size)
        # HTTP tracker URL -> how many info_hash of a request it was seen to read
        self.reads: Lru[str, int] = Lru(cache_size)
        # HTTP tracker URLs whose last reply that had keys held one that is no asked hash
        self.distrust: Lru[str, bool] = Lru(cache_size)
        self.udp_packets = self.http_requests = 0

    def seat(self, url: str, info_hash: bytes, patience: float, place=lambda: 0.0) -> Seat | None:
        """``info_hash``'s seat in ``url``'s next scrape (``ScrapeGroups.seat``), or None: not scraped
        (scrape off, or the tracker learned as one that cannot scrape). Raises ``StoreError``."""
        if not self.enabled or self.health.no_scrape_until(url) is not None:
            return None
        return self.groups.seat(url, info_hash, patience, place)

    def answer(self, url: str, seat: Seat) -> ScrapeCounts | None:
        """The counts ``seat`` got, or None: announce (left out of the reply, or the tracker cannot
        scrape, now learned). Raises what failed the scrape."""
        try:
            return seat.get()
        except ScrapeUnsupported:
            self.health.learn_no_scrape(url, time.time() + RELEARN_SECONDS)
            return None

    @staticmethod
    def _per_request(url: str) -> int:
        return UDP_HASHES if url.partition(":")[0].lower() == "udp" else HTTP_HASHES

    def _scrape_many(self, url: str, hashes: list[bytes], deadline: float) -> list:
        """Per hash: its counts, None (left out), or the exception that failed its request."""
        scheme = url.partition(":")[0].lower()
        size = self._per_request(url)
        out: list = []
        for start in range(0, len(hashes), size):
            chunk = hashes[start:start + size]
            try:
                if scheme == "udp":
                    out += self._udp(url, chunk, deadline)
                elif scheme in ("http", "https"):
                    out += self._http(url, chunk, deadline)
                else:
                    raise ScrapeUnsupported(f"no scrape for a {scheme!r} tracker")
            except ScrapeUnsupported as e:
                out += [e] * len(chunk)
            except Exception as e:  # noqa: BLE001 - the request's failure is each of its torrents'
                self._failed_request(url, e)
                out += [e] * len(chunk)
            else:
                self.failed.pop(url, None)
        return out

    def _failed_request(self, url: str, e: Exception) -> None:
        """One failed request: one failure of the tracker, and one toward ``SILENT_LIMIT``."""
        n = self.failed.get(url, 0) + 1
        self.failed[url] = n
        if n >= SILENT_LIMIT:
            self.failed.pop(url)
            self.health.learn_no_scrape(url, time.time() + RELEARN_SECONDS)
        self.on_failure(url, e)

    def _udp(self, url: str, chunk: list[bytes], deadline: float) -> list[ScrapeCounts | None]:
        """One packet's counts, None for each hash past those the tracker read (its reply is as long
        as what it read: zeros for swarms it does not hold, in order); a silent address gives way to
        the next, each given an equal share of the time."""
        targets = self.udp_targets(url)
        for k, (family, addr) in enumerate(targets):
            self.udp_packets += 1
            try:
                entries = self.udp.scrape(addr, family, chunk,
                                          share_of_time(deadline, time.monotonic(), len(targets) - k))
            except TrackerRefused as e:
                raise ScrapeUnsupported(str(e)) from None
            except TrackerTimeout:
                if k == len(targets) - 1:
                    raise
                continue
            read = [ScrapeCounts(e.seeders, e.leechers, e.completed) for e in entries]
            return read + [None] * (len(chunk) - len(read))
        raise TrackerTimeout("the tracker has no address to scrape")

    def _http(self, url: str, chunk: list[bytes], deadline: float) -> list[ScrapeCounts | None]:
        base = scrape_url(url)
        if base is None:
            raise ScrapeUnsupported("the announce URL has no scrape form (BEP 48)")
        self.http_requests += 1
        self.requests.sent(url, "scrape")
        try:
            body = self.http_body(scrape_request(base, chunk), deadline)
        except HttpStatusError as e:
            if 400 <= e.status < 500:
                raise ScrapeUnsupported(str(e)) from None
            raise
        try:
            found = parse_scrape_reply(body, chunk)
        except TrackerRefused as e:  # a failure reason: scraping is not for us here
            raise ScrapeUnsupported(str(e)) from None
        if not found.files:  # a 200 that is no scrape reply (an announce page at the scrape URL)
            raise ScrapeUnsupported("the scrape URL's reply holds no 'files' dictionary")
        return self._read(url, chunk, found)

    def _read(self, url: str, chunk: list[bytes], found: ScrapeFound) -> list[ScrapeCounts | None]:
        """Per hash of one request: its counts, EMPTY when the tracker read it and left it out, or None."""
        if found.others:
            self.distrust[url] = True
        elif found.listed:
            self.distrust.pop(url, None)
        places = [i for i, h in enumerate(chunk) if h in found]
        if len(places) > 1 or (places and 0 < places[0] < len(chunk) - 1):
            self.reads[url] = max(self.reads.get(url, 0), places[-1] + 1)
        if self.distrust.get(url):
            read = 0
        else:
            read = len(chunk) if len(chunk) == 1 else self.reads.get(url, 0)
        return [found.get(h, EMPTY if i < read else None) for i, h in enumerate(chunk)]
