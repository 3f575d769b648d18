"""Ask one tracker for one torrent's peers: what the worker calls (contract §3).

``Trackers.announce(url, info_hash_hex)`` blocks the calling greenlet until
the tracker answered or its deadline passed, and never raises for the remote
side's faults: they come back as ``SourceResult.failed`` with the reason.

Self-exclusion: the crawler announces as a leecher (``left=1``, event
``started``) so trackers that hide seeders from seeders still show every
peer, on a port that identifies it (``Settings.announce_port``, or one random
high port chosen once per namespace and shared by every worker through
Redis, so a worker killed before its withdrawal leaves an entry the others
recognise as the crawler's, not a peer to count). Its own entry is dropped
from the reply (see ``SelfFilter``), and it withdraws at once with ``stopped``. The counts of the
``stopped`` reply are the swarm without us (opentracker counts the announcer
in the first reply); if the withdrawal fails, one leecher is subtracted when
our own entry was listed.

A tracker host with several addresses (A and AAAA records, round-robin DNS)
is tried address after address, every address checked by the address
policy, each try given an equal share of the time left
(``addresses.share_of_time``). The address that answered is tried first
next time, so a dead address costs one announce its share, not every
announce (``tracker_addresses``).

Bounds: at most ``Settings.source_peers_bound(max)`` peers are kept of one
reply, the rest counted per tracker in tracker health, cut before their
entries are decoded (349,504 entries of a 2 MiB reply block the event loop
for a second). Every cache keyed by host or address is an ``Lru`` of
``Settings.tracker_cache_size`` entries.

numwant and caps: trackers list the requester in their own replies
(opentracker and others register the announcer before they pick), so we ask
for max + 1 and keep max real peers. Many trackers clamp numwant to their
own figure (e.g. 82), below our max; such a tracker would never look "full"
(§2). A reply that returned fewer entries than asked while the tracker's own
counts, seeders + leechers - 1 (the - 1: it may count us), say the swarm is
larger shows a cap; tracker health keeps the largest such reply, raised by
any later reply that returns more, and ``min(configured max, learned cap)``
is that tracker's max for scoring. A cap is never learned below
``MIN_LEARNED_CAP`` entries.

Announces to one UDP tracker asked in one turn of the event loop go out in
one batch (``announce_groups``). Scrape first: a tracker that reports the
swarm empty is not announced to (``tracker_scrapes``).

Outcomes: an answer, a refusal (the tracker's error reply: alive, never
backs off) or a failure (any exception of an exchange but ``StoreError``,
ours), recorded in its health. Every error text is redacted.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace

import gevent
import redis

from crawler import redact
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.sources import addresses
from crawler.sources.addresses import AddressCheck, Resolver, policy, share_of_time
from crawler.sources.request_counts import RequestCounts
from crawler.sources.result import SourceResult
from crawler.sources.trackers import udp_codec
from crawler.sources.trackers.announce_groups import AnnounceGroups
from crawler.sources.trackers.health import ANSWER, BLOCKED, FAILURE, REFUSAL, TrackerHealth
from crawler.sources.trackers.http_client import http_get, tls_context
from crawler.sources.trackers.http_codec import announce_url, parse_announce_reply
from crawler.sources.trackers.http_exchange import http_exchange
from crawler.sources.trackers.scrape_groups import Seat
from crawler.sources.trackers.self_filter import SelfFilter, shared_port
from crawler.sources.trackers.tracker_addresses import TrackerAddresses
from crawler.sources.trackers.tracker_errors import TrackerRefused, TrackerTimeout
from crawler.sources.trackers.tracker_scrapes import TrackerScrapes
from crawler.sources.trackers.tracker_urls import url_parts
from crawler.sources.trackers.udp_client import UdpTrackerClient

# Below this many entries a short reply is not taken as a cap: real trackers
# cap at 50 or more, and a tiny learned cap would call small swarms "full".
MIN_LEARNED_CAP = 10


class Trackers:
    """Every tracker exchange of one worker process (one per process, shared by greenlets).

    Every bound comes from ``settings``. ``udp``, ``address_check`` and
    ``resolver`` are collaborators no setting describes, injected by tests
    (a UDP client of their own, one loopback address treated as public, names
    with several addresses); None: the real ones.
    """

    def __init__(self, settings: Settings, client: redis.Redis, keys: Keys, udp: UdpTrackerClient | None = None,
                 address_check: AddressCheck | None = None, resolver: Resolver | None = None):
        self.settings = settings
        # The address policy (contract §3); injectable so tests can treat one
        # loopback address as public and see the real refusal of the others.
        self.check = address_check or policy(settings.allow_private)
        # None: the system resolver; tests inject names with several addresses.
        self.resolver = resolver
        # Default trust store plus Settings.tracker_ca_file; built once (loading
        # the system store costs milliseconds). Raises SettingsError at start.
        self.tls = tls_context(settings.tracker_ca_file)
        self.udp = udp or UdpTrackerClient(settings.udp_timeout, settings.udp_retries,
                                             cache_size=settings.tracker_cache_size)
        self.health = TrackerHealth(
            client, keys, settings.tracker_backoff_base, settings.tracker_backoff_max, settings.tracker_backoff_after,
            cache_size=settings.tracker_cache_size, prune_after=settings.tracker_prune_seconds,
            named_always=tuple(t.url for t in settings.trackers),
        )
        self.port = settings.announce_port or shared_port(client, keys)
        self.peer_id = b"-PC0100-" + os.urandom(12)
        self.key = random.getrandbits(32)
        self.self_filter = SelfFilter(self.port)
        # The withdrawal is best effort: one try, at most one UDP try's time
        # (Settings.udp_timeout), whether the tracker speaks UDP or HTTP.
        self.stop_timeout = settings.udp_timeout
        self.addresses = TrackerAddresses(self.check, resolver, settings.tracker_cache_size)
        # Every request sent, counted where it is sent (a datagram by its address: udp_targets names them).
        self.requests = RequestCounts(client, keys, settings.top_trackers, settings.tracker_cache_size)
        self.udp.on_sent, self.udp_targets = self.requests.sent_to, self.requests.naming(self.addresses.udp_targets)
        self.groups = AnnounceGroups(self._udp_many)
        self.closed = False  # close() was called (what runs beside the visits stops)
        self.on_close: list = []  # called first by close(): the scrapes asked ahead hand back what they hold
        self.http_announces_sent = 0  # HTTP announces and withdrawals (figures, beside the UDP client's)
        self.scrapes = TrackerScrapes(settings.scrape_first, self.udp, self.udp_targets, self._http_body,
                                      self.health, settings.tracker_cache_size, self._note, self.requests)

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
        configured = self.settings.tracker_max_peers(url)
        backing_off = self._backing_off(url, configured)
        if backing_off is not None:
            return backing_off
        info_hash = bytes.fromhex(info_hash_hex)
        scheme = url_parts(url)[0]
        try:
            if scheme == "udp":
                return self.groups.join(url, info_hash, deadline)
            elif scheme in ("http", "https"):
                result = self._http(url, info_hash, configured, deadline)
            else:
                return self._failed(url, f"unsupported tracker scheme {scheme!r}", configured)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever a tracker's bytes provoke is that tracker's failure
            return self._fault(url, e, configured)
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
        if not self.scrapes.enabled:
            return None
        backing_off = self._backing_off(url, self.settings.tracker_max_peers(url))
        if backing_off is not None:
            return backing_off
        return self.scrapes.seat(url, bytes.fromhex(info_hash_hex), patience, place)

    def scrape_answer(self, url: str, seat: Seat) -> SourceResult | None:
        """What ``seat``'s scrape settles (as ``scrape_first``), or None: announce. Raises only ``StoreError``."""
        configured = self.settings.tracker_max_peers(url)
        try:
            counts = self.scrapes.answer(url, seat)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - as in announce: the tracker's failure for this visit
            # noted in the tracker's health once per failed request, by the scrapes
            return self._fault(url, e, configured, note=False)
        if counts is None or counts.seeders or counts.leechers:
            return None
        # Reported empty: not announced to, and no peers from it (tracker_scrapes).
        self.health.record(url, ANSWER, returned=0)
        cap = self.health.cap(url)
        return SourceResult(source=url, ok=True, max_peers=min(configured, cap) if cap else configured,
                            seeders=0, leechers=0, asked="scrape")

    def _backing_off(self, url: str, configured: int) -> SourceResult | None:
        """The failed result of asking ``url`` while it backs off, or None: it may be asked now."""
        until = self.health.backing_off_until(url)
        if until is None:
            return None
        return replace(self._failed(url, f"tracker backing off for {until - time.time():.0f} s more", configured),
                       asked="backoff")

    def _failed(self, url: str, error: str, max_peers: int) -> SourceResult:
        return SourceResult.failed(url, redact.text(error, url), max_peers)

    def _fault(self, url: str, e: Exception, configured: int, note: bool = True) -> SourceResult:
        """The failed result for what an exchange with ``url`` raised, noted in the tracker's health (``_note``)."""
        if note:
            self._note(url, e)
        if isinstance(e, addresses.AddressRefused):
            return replace(self._failed(url, str(e), configured), blocked=True)
        if isinstance(e, TrackerRefused):
            return replace(self._failed(url, redact.text(str(e), url), configured), refused=True)
        return self._failed(url, f"{type(e).__name__}: {e}", configured)

    def _note(self, url: str, e: Exception) -> None:
        """``e``, what one exchange with ``url`` raised, in the tracker's health.

        An address our policy refuses is not the tracker's fault (noted apart, never backs it off); an
        error reply is a refusal; anything else (silence, garbage, a protocol or TLS error, a name that
        does not resolve) a failure. Each with its message.
        """
        if isinstance(e, addresses.AddressRefused):
            self.health.record(url, BLOCKED, message=str(e))
        elif isinstance(e, TrackerRefused):
            self.health.record(url, REFUSAL, message=redact.text(str(e), url))
        else:
            self.health.record(url, FAILURE, message=f"{type(e).__name__}: {e}")

    def announce_many(self, url: str, info_hash_hexes: list[str], deadline: float | None = None) -> list[SourceResult]:
        """``announce`` of each of ``info_hash_hexes`` to ``url``, together; the results in order.

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
        if url_parts(url)[0] != "udp" or len(info_hash_hexes) < 2:
            jobs = [gevent.spawn(self.announce, url, h, deadline, False) for h in info_hash_hexes]
            gevent.joinall(jobs, raise_error=True)
            return [j.value for j in jobs]
        results: list = [None] * len(info_hash_hexes)

        def deliver(i: int, result: SourceResult) -> None:
            results[i] = result

        self._udp_many(url, [bytes.fromhex(h) for h in info_hash_hexes], deadline, deliver)
        return results

    @property
    def batches(self) -> int:
        """Batches of announces made together (figures for tests and the benchmark)."""
        return self.groups.batches

    def _udp_many(self, url: str, hashes: list[bytes], deadline: float, deliver) -> None:
        """The UDP exchanges of a batch: ``deliver(i, result)`` for each hash as soon as its
        result is final (its announce answered and its withdrawal ended, or it failed).

        Raises only ``StoreError``; every hash not yet delivered gets the failure.
        """
        configured = self.settings.tracker_max_peers(url)
        delivered: set[int] = set()

        def final(i: int, result: SourceResult) -> None:
            delivered.add(i)
            deliver(i, result)

        def fail_the_rest(result: SourceResult) -> None:
            for i in range(len(hashes)):
                if i not in delivered:
                    final(i, result)

        _, host, port, netloc = url_parts(url)
        if not host or not port:
            return fail_the_rest(self._failed(url, "UDP tracker URL lacks a host or port", configured))
        backing_off = self._backing_off(url, configured)
        if backing_off is not None:
            return fail_the_rest(backing_off)
        try:
            self._udp_exchanges(url, host, port, netloc, hashes, configured, deadline, final)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - as in announce: the tracker's (or its name's) failure
            fail_the_rest(self._fault(url, e, configured))
        # Every hash is answered above; this guard keeps a caller from waiting for ever if not.
        fail_the_rest(self._failed(url, "no announce reply within the visit deadline", configured))

    def _udp_exchanges(self, url: str, host: str, port: int, netloc: str, hashes: list[bytes], configured: int,
                       deadline: float, final) -> None:
        """Announce ``hashes`` to each address of the tracker in turn (only silence moves a
        torrent on to the next address), each answer followed by its withdrawal within
        the stop timeout; ``final(i, result)`` as each hash's result is known."""
        targets = self.udp_targets(url)
        asked = configured + 1  # the tracker may list us in its reply
        common = {"peer_id": self.peer_id, "port": self.port, "num_want": asked, "key": self.key}
        silent: dict[int, list[str]] = {i: [] for i in range(len(hashes))}
        todo = list(range(len(hashes)))
        for k, (family, addr) in enumerate(targets):
            last = k == len(targets) - 1

            def done(j: int, answer, withdrawn, idx=todo, last=last, family=family, addr=addr) -> None:
                i = idx[j]
                if isinstance(answer, TrackerTimeout):
                    silent[i].append(str(answer))
                    if not last:
                        return  # the next address is asked
                    why = silent[i]
                    answer = TrackerTimeout(why[0] if len(why) == 1 else
                                            f"none of its {len(why)} addresses answered: " + "; ".join(why))
                elif len(targets) > 1:
                    self.addresses.good[("udp", host, port)] = (family, addr)
                if isinstance(answer, Exception):
                    final(i, self._fault(url, answer, configured))
                else:
                    final(i, self._result(url, hashes[i], configured, asked, answer.peers, answer.cut,
                                          answer.seeders, answer.leechers, withdrawn, float(answer.interval),
                                          None, None))

            replies = self.udp.announce_many(
                addr, family, [hashes[i] for i in todo],
                deadline=share_of_time(deadline, time.monotonic(), len(targets) - k),
                event=udp_codec.EVENT_STARTED, limit=self.settings.source_peers_bound(configured),
                withdraw=(self.stop_timeout, deadline), on_done=done, **common)
            todo = [i for i, r in zip(todo, replies) if isinstance(r, TrackerTimeout)]
            if not todo:
                break

    def _http_body(self, url: str, deadline: float) -> bytes:
        """The body of a 200 GET of ``url``, within ``deadline`` and ``Settings.http_timeout``."""
        s = self.settings
        return http_get(url, min(deadline, time.monotonic() + s.http_timeout), s.http_max_bytes, self.check,
                        tls=self.tls, resolver=self.resolver, preferred=self.addresses.good).body

    def _result(self, url, info_hash, configured, asked, peers, cut, seeders, leechers, stopped, interval,
                min_interval, warning):
        """The answer's ``SourceResult``, its health recorded (cut peers, cap evidence)."""
        returned = len(peers) + cut  # every entry the tracker handed out, ours included
        peers, own_listed = self.self_filter.strip(peers)
        capped = (
            MIN_LEARNED_CAP <= returned < asked
            and seeders is not None and leechers is not None
            and seeders + leechers - 1 > returned
        )
        self.health.record(url, ANSWER, cut=cut, returned=returned, capped=capped)
        cap = self.health.cap(url)
        max_peers = min(configured, cap) if cap else configured
        if stopped is not None:
            seeders, leechers = stopped
        elif own_listed and leechers:
            leechers -= 1
        return SourceResult(
            source=url, ok=True, peers=frozenset(peers), max_peers=max_peers,
            seeders=seeders, leechers=leechers, interval=interval, min_interval=min_interval,
            warning=None if warning is None else redact.text(warning, url), returned=returned,
        )

    def _http(self, url: str, info_hash: bytes, configured: int, deadline: float) -> SourceResult:
        s = self.settings
        asked = configured + 1  # the tracker may list us in its reply
        limit = s.source_peers_bound(configured)

        def get(event: str, until: float, keep: int):
            self.http_announces_sent += 1
            self.requests.sent(url, "withdrawal" if event == "stopped" else "announce")
            u = announce_url(url, info_hash, self.peer_id, self.port, asked, event=event, key=self.key)
            return parse_announce_reply(self._http_body(u, until), keep)

        reply, stopped = http_exchange(get, deadline, s.http_timeout, self.stop_timeout, limit)
        # peers and peers6 were each cut to the bound; together they may still pass it.
        peers, cut = reply.peers[:limit], reply.cut + max(0, len(reply.peers) - limit)
        interval, least = (None if v is None else float(v) for v in (reply.interval, reply.min_interval))
        return self._result(url, info_hash, configured, asked, peers, cut, reply.complete, reply.incomplete,
                            stopped, interval, least, reply.warning)

    def close(self) -> None:
        """Run ``on_close``, write the request counts and batched health, close the UDP sockets (done)."""
        self.closed = True
        for hook in self.on_close:
            hook()
        self.requests.close()
        self.health.close()
        self.udp.close()
