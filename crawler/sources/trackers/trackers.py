"""Ask one tracker for one torrent's peers: what the worker calls (contract §3).

``Trackers.announce(url, info_hash_hex)`` blocks the calling greenlet until
the tracker answered or its deadline passed, and never raises for the remote
side's faults: they come back as ``SourceResult.failed`` with the reason
(``outcomes``). Scrape first: a tracker that reports the swarm empty is not
announced to (``tracker_scrapes``); the others are announced to and the
crawler withdrawn (``announcer``, which says how the crawler keeps itself
out of what it counts). Announces to one UDP tracker asked in one turn of
the event loop go out in one batch (``announce_groups``). Every cache keyed
by host or address is an ``Lru`` of ``Settings.tracker_cache_size`` entries.
Whoever watches the process (its ``/metrics``) is told each announce's and
scrape's outcome through its ``Observer``.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import gevent
import redis

from crawler import spawning
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.observer import QUIET, Observer
from crawler.settings import Settings
from crawler.sources.addresses import AddressCheck, Resolver, policy
from crawler.sources.request_counts import RequestCounts
from crawler.sources.result import SourceResult
from crawler.sources.trackers.announce_groups import AnnounceGroups
from crawler.sources.trackers.announcer import Announcer
from crawler.sources.trackers.health import ANSWER, TrackerHealth
from crawler.sources.trackers.http_client import http_get, tls_context
from crawler.sources.trackers.outcomes import Outcomes
from crawler.sources.trackers.scrape_groups import Seat
from crawler.sources.trackers.self_filter import shared_port
from crawler.sources.trackers.tracker_addresses import TrackerAddresses
from crawler.sources.trackers.tracker_scrapes import TrackerScrapes
from crawler.sources.trackers.tracker_urls import url_parts
from crawler.sources.trackers.udp_client import UdpTrackerClient


class Trackers:
    """Every tracker exchange of one worker process (one per process, shared by greenlets).

    Every bound comes from ``settings``. ``udp``, ``address_check`` and
    ``resolver`` are collaborators no setting describes, injected by tests
    (a UDP client of their own, one loopback address treated as public, names
    with several addresses); None: the real ones. ``observer`` is told every
    announce's and scrape's outcome and every request sent.
    """

    def __init__(self, settings: Settings, client: redis.Redis, keys: Keys, udp: UdpTrackerClient | None = None,
                 address_check: AddressCheck | None = None, resolver: Resolver | None = None,
                 observer: Observer = QUIET):
        self.settings, self.observer = settings, observer
        # The address policy (contract §3); injectable so tests can treat one
        # loopback address as public and see the real refusal of the others.
        self.check = address_check or policy(settings.allow_private)
        # None: the system resolver; tests inject names with several addresses.
        self.resolver = resolver
        # Default trust store plus Settings.tracker_ca_file, built at start (a file that does not load
        # is a SettingsError there). Without a CA file None: http_get makes the default context at the
        # first HTTPS handshake (loading the system store is ~25 ms of CPU, which a worker asking no
        # HTTPS tracker never spends).
        self.tls = tls_context(settings.tracker_ca_file) if settings.tracker_ca_file is not None else None
        self.udp = udp or UdpTrackerClient(settings.udp_timeout, settings.udp_retries,
                                             cache_size=settings.tracker_cache_size)
        self.health = TrackerHealth(
            client, keys, settings.tracker_backoff_base, settings.tracker_backoff_max, settings.tracker_backoff_after,
            cache_size=settings.tracker_cache_size, prune_after=settings.tracker_prune_seconds,
            named_always=tuple(t.url for t in settings.trackers),
        )
        self.outcomes = Outcomes(self.health)
        self.port = settings.announce_port or shared_port(client, keys)
        self.addresses = TrackerAddresses(self.check, resolver, settings.tracker_cache_size)
        # Every request sent, counted where it is sent (a datagram by its address: udp_targets names them).
        self.requests = RequestCounts(client, keys, settings.top_trackers, settings.tracker_cache_size, observer)
        self.udp.on_sent, self.udp_targets = self.requests.sent_to, self.requests.naming(self.addresses.udp_targets)
        self.announcer = Announcer(settings, (b"-PC0100-" + os.urandom(12), self.port, random.getrandbits(32)),
                                   udp=self.udp, addresses=self.addresses, udp_targets=self.udp_targets,
                                   requests=self.requests, outcomes=self.outcomes, http_body=self._http_body)
        self.groups = AnnounceGroups(self.announcer.udp_many)
        self.closed = False  # close() was called (what runs beside the visits stops)
        self.on_close: list = []  # called first by close(): the scrapes asked ahead hand back what they hold
        self.scrapes = TrackerScrapes(settings.scrape_first, self.udp, self.udp_targets, self._http_body,
                                      self.health, settings.tracker_cache_size, self.outcomes.note, self.requests)

    @property
    def http_announces_sent(self) -> int:
        """HTTP announces and withdrawals sent (figures, beside the UDP client's)."""
        return self.announcer.http_sent

    def announce(self, url: str, info_hash_hex: str, deadline: float | None = None,
                 scrape: bool = True) -> SourceResult:
        """Peers of ``info_hash_hex`` from the tracker at ``url``.

        ``deadline`` is a time.monotonic() value (default: now +
        ``Settings.visit_deadline``). ``scrape``: ask ``scrape_first`` before
        announcing (a visit that already did passes False). Returns
        ``SourceResult`` (ok, or failed with the reason, redacted); raises
        only ``StoreError`` (Redis, ours).
        """
        if deadline is None:
            deadline = time.monotonic() + self.settings.visit_deadline
        if scrape:
            settled = self.scrape_first(url, info_hash_hex, deadline)
            if settled is not None:
                return settled
        result = self._announce(url, info_hash_hex, deadline)
        self.observer.announced(url, result)
        return result

    def _announce(self, url: str, info_hash_hex: str, deadline: float) -> SourceResult:
        configured = self.settings.tracker_max_peers(url)
        backing_off = self.outcomes.backing_off(url, configured)
        if backing_off is not None:
            return backing_off
        info_hash = bytes.fromhex(info_hash_hex)
        scheme = url_parts(url)[0]
        try:
            if scheme == "udp":
                return self.groups.join(url, info_hash, deadline)
            elif scheme in ("http", "https"):
                result = self.announcer.http(url, info_hash, configured, deadline)
            else:
                return self.outcomes.failed(url, f"unsupported tracker scheme {scheme!r}", configured)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever a tracker's bytes provoke is that tracker's failure
            return self.outcomes.fault(url, e, configured)
        return result

    def scrape_first(self, url: str, info_hash_hex: str, deadline: float) -> SourceResult | None:
        """The tracker's answer when its scrape settles the visit, else None: announce.

        It settles it when the tracker reports the swarm empty (ok, no peers,
        ``asked="scrape"``), when the scrape failed (that failure), or when
        the tracker is backing off. Raises only ``StoreError``.
        """
        seat = self.scrape_seat(url, info_hash_hex, max(deadline - time.monotonic(), 0.0))
        return seat if not isinstance(seat, Seat) else self.scrape_answer(url, seat)

    def scrape_seat(self, url: str, info_hash_hex: str, patience: float,
                    place=lambda: 0.0) -> Seat | SourceResult | None:
        """The torrent's seat in ``url``'s next scrape (``TrackerScrapes.seat``; ``place()``: the wait
        the announce cap gives its request), the tracker's answer when it backs off, or None: announce
        (no scrape). Raises only ``StoreError``."""
        got = self._scrape_seat(url, info_hash_hex, patience, place)
        if not isinstance(got, Seat):  # settled without a scrape: backing off, or no scrape (announce)
            self.observer.scraped(url, got)
        return got

    def _scrape_seat(self, url: str, info_hash_hex: str, patience: float, place) -> Seat | SourceResult | None:
        if not self.scrapes.enabled:
            return None
        backing_off = self.outcomes.backing_off(url, self.settings.tracker_max_peers(url))
        if backing_off is not None:
            return backing_off
        return self.scrapes.seat(url, bytes.fromhex(info_hash_hex), patience, place)

    def scrape_answer(self, url: str, seat: Seat) -> SourceResult | None:
        """What ``seat``'s scrape settles (as ``scrape_first``), or None: announce. Raises only ``StoreError``."""
        result = self._scrape_answer(url, seat)
        self.observer.scraped(url, result)
        return result

    def _scrape_answer(self, url: str, seat: Seat) -> SourceResult | None:
        configured = self.settings.tracker_max_peers(url)
        try:
            counts = self.scrapes.answer(url, seat)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - as in announce: the tracker's failure for this visit
            # noted in the tracker's health once per failed request, by the scrapes
            return self.outcomes.fault(url, e, configured, note=False)
        if counts is None or counts.seeders or counts.leechers:
            return None
        # Reported empty: not announced to, and no peers from it (tracker_scrapes).
        self.health.record(url, ANSWER, returned=0)
        cap = self.health.cap(url)
        return SourceResult(source=url, ok=True, max_peers=min(configured, cap) if cap else configured,
                            seeders=0, leechers=0, asked="scrape")

    def announce_many(self, url: str, info_hash_hexes: list[str], deadline: float | None = None,
                      deliver: Callable[[int, SourceResult], None] | None = None) -> list[SourceResult]:
        """``announce`` of each of ``info_hash_hexes`` to ``url``, together; the results in order, each
        also told to ``deliver(position, result)`` as soon as it is final.

        A UDP tracker is asked from this greenlet, every announce in flight at
        once, each followed by its withdrawal as soon as it answered
        (``UdpTrackerClient.announce_many``): one greenlet per batch rather
        than one per torrent, which is what kept the tracker layer's cost per
        announce from growing with the number of greenlets (docs/sources.md,
        "Benchmark"). Other schemes are asked one torrent per greenlet.
        Raises only ``StoreError``.
        """
        if deadline is None:
            deadline = time.monotonic() + self.settings.visit_deadline
        results: list = [None] * len(info_hash_hexes)
        announced = self.observer.announced

        def final(i: int, result: SourceResult, observed: bool = False) -> None:
            results[i] = result
            if not observed:
                announced(url, result)
            if deliver is not None:
                deliver(i, result)

        if len(info_hash_hexes) == 1:
            final(0, self.announce(url, info_hash_hexes[0], deadline, False), observed=True)
        elif url_parts(url)[0] != "udp":
            jobs = [spawning.spawn(lambda i, h: final(i, self.announce(url, h, deadline, False), True), i, h)
                    for i, h in enumerate(info_hash_hexes)]
            gevent.joinall(jobs, raise_error=True)
        else:
            self.announcer.udp_many(url, [bytes.fromhex(h) for h in info_hash_hexes], deadline, final)
        return results

    @property
    def batches(self) -> int:
        """Batches of announces made together (figures for tests and the benchmark)."""
        return self.groups.batches

    def _http_body(self, url: str, deadline: float) -> bytes:
        """The body of a 200 GET of ``url``, within ``deadline`` and ``Settings.http_timeout``."""
        s = self.settings
        return http_get(url, min(deadline, time.monotonic() + s.http_timeout), s.http_max_bytes, self.check,
                        tls=self.tls, resolver=self.resolver, preferred=self.addresses.good).body

    def close(self) -> None:
        """Run ``on_close``, write the request counts and batched health, close the UDP sockets (done)."""
        self.closed = True
        for hook in self.on_close:
            hook()
        self.requests.close()
        self.health.close()
        self.udp.close()
