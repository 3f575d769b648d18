"""The Mainline DHT as a peer source (contract §3), through one libtorrent session.

Strategy: one ``libtorrent.session`` per worker process runs the DHT only (no
torrents). Every greenlet calls ``DhtSource.lookup(info_hash_hex)``, which
starts a ``get_peers`` traversal (``session.dht_get_peers``, asynchronous) and
sleeps on a gevent event. Alerts reach the hub through ``AlertPump`` (a pipe
libtorrent writes to, watched by the hub: no polling, nothing that waits
inside libtorrent), and are routed by info-hash (a ``Target`` per hash with
a traversal running, see dht_lookups):

- ``dht_get_peers_reply_alert``: a node answered with peers; they are added
  to every waiting lookup of that info-hash.
- ``dht_outgoing_get_peers_alert``: a traversal of the hash sent another
  query: the lookup is still making progress, and the pacer counts a query
  to that node.

libtorrent posts no "lookup finished" alert for ``dht_get_peers``, so a lookup
ends at the first of: ``max_peers`` peers gathered, no new query or reply for
``dht_settle`` seconds (the traversal is over or only waits on dead nodes, which
would cost the full query timeout), or the ``dht_timeout`` deadline. A lookup
sleeps on its event until it has its peers; one hub timer (``TICK``) wakes
those that settled or reached their deadline.

Answered or failed: a lookup that gathered no peers answered only if DHT
nodes responded while it ran (``dht_messages_in`` minus incoming queries,
read before the traversal, as libtorrent handles posted calls in order, and
after it). No response, an empty routing table or no bootstrap make it
``failed``, never "0 peers": a crawler that lost its network must not decay
the catalogue (contract §1).

Pacing: a lookup starts only when ``NodePacer`` (dht_pacing) says no node
would then get more than ``dht_node_rate`` queries a second from this
process; until then it waits at the ``PaceGate`` (dht_pace_gate), and fails
("paced") if it cannot start before its deadline. Its ``Target`` stays
counted by the pacer until the hash has been quiet for
``dht_pacing.TRAVERSAL_QUIET`` seconds (a traversal outlives its lookup).

Cost: the dispatcher runs for every query and reply of every lookup (~18
alerts a lookup), so per alert it does two attribute reads, a dictionary
look-up and a counter update (bench/bench_dht.py).
"""

from __future__ import annotations

import sys
import time
from typing import Self

import gevent
import libtorrent as lt
from gevent.event import Event
from gevent.lock import BoundedSemaphore

from crawler import logs
from crawler.errors import PeercrawlError, StoreError
from crawler.observer import QUIET, Observer
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.dht.dht_lookups import Lookup, Target, gather_peers
from crawler.sources.dht.dht_pace_gate import PaceGate
from crawler.sources.dht.dht_pacing import Group, NodePacer
from crawler.sources.dht.dht_session import new_session, resolve_bootstrap
from crawler.sources.dht_alerts import AlertPump, StatsRequests, responses
from crawler.sources.dht_listen import listening
from crawler.sources.result import SourceResult

log = logs.get(__name__)

SOURCE = "dht"


class DhtClosed(PeercrawlError):
    """The DHT source was closed while a lookup waited."""


# How often waiting lookups are checked for settle and deadline: both are
# honoured within this much.
TICK = 0.05

_QUERY_ALERT = lt.dht_outgoing_get_peers_alert
_PEERS_ALERT = lt.dht_get_peers_reply_alert
_STATS_ALERT = lt.session_stats_alert
_BOOTSTRAP_ALERT = lt.dht_bootstrap_alert
_SAMPLE_ALERT = lt.dht_sample_infohashes_alert


class DhtSource:
    """The worker process's DHT node, shared by all its greenlets.

    ``settings``: dht_listen, dht_bootstrap, dht_upload_rate_limit,
    dht_lookups_in_flight, dht_timeout, dht_max_peers, dht_node_rate,
    dht_node_window, allow_private are used, and dht_settle: seconds without
    a new reply after which a lookup is over.
    ``read_only``: run as a BEP 43 read-only node (see dht_session).
    ``extra``: libtorrent settings overriding ours (tests and benchmarks).
    ``requests``: the process's ``RequestCounts``, told of each lookup that starts a traversal.

    Raises ``AddressRefused`` if a bootstrap node is not public and private
    addresses are not allowed, ``SettingsError`` if no listen address is
    usable. Call from a greenlet of the hub that will run the lookups.
    """

    def __init__(self, settings: Settings, read_only: bool = True, extra: dict | None = None, requests=None,
                 observer: Observer = QUIET):
        self.settings, self.requests, self.observer = settings, requests, observer
        self.max_peers = settings.dht_max_peers
        self.timeout = settings.dht_timeout
        self._unbooted = False  # a lookup waited its whole deadline for the bootstrap (_refusal)
        self.settle = settings.dht_settle
        # IPv4 and IPv6 where the machine has it, each with its own routers (dht_listen).
        self.listen, self.bootstrap = listening(
            settings.dht_listen, resolve_bootstrap(settings.dht_bootstrap, settings.allow_private))
        self._session = new_session(settings, self.bootstrap, read_only, extra, self.listen)
        # Every info-hash with a traversal not yet retired by the pacer.
        self._targets: dict[bytes, Target] = {}
        # Lookups whose greenlet still waits; a hub timer wakes those that
        # settled or hit their deadline (one timer, not one per lookup).
        self._live: set[Lookup] = set()
        # Referenced: while it runs (only while lookups wait) it keeps the
        # hub alive, as their timeouts would.
        self._ticker = gevent.get_hub().loop.timer(TICK, TICK)
        self._in_flight = BoundedSemaphore(settings.dht_lookups_in_flight)
        self._pacer = NodePacer(settings.dht_node_rate, settings.dht_node_window, on_retire=self._unregister)
        self._gate = PaceGate(self._pacer)
        self._stats = StatsRequests()
        self._bootstrapped = Event()
        self._closed = False
        # BEP 51 answers (crawler.sources.dht.discovery): (endpoint, interval s, hashes, nodes' endpoints)
        self.samples: list[tuple] = []
        self.sampled = Event()
        self._pump = AlertPump(self._session, self._dispatch)
        log.info("dht_started", listen=listen_text(self.listen), bootstrap=len(self.bootstrap))

    # --- hub side: never switches -----------------------------------------

    def _dispatch(self, alerts: list) -> None:
        """Handle one batch of alerts (AlertPump); runs in the hub."""
        target_of, sent = self._targets.get, self._pacer.sent
        now = time.monotonic()
        for alert in alerts:
            kind = type(alert)
            try:
                if kind is _QUERY_ALERT:
                    # A traversal sent a get_peers query: progress for the
                    # hash, and a query to that address for the pacer.
                    endpoint = alert.endpoint  # one conversion from libtorrent's, used twice
                    target = target_of(alert.info_hash.to_bytes())
                    if target is not None:
                        target.last_activity = now
                        target.queries += 1
                        target.queried.append(endpoint)
                    sent(endpoint[0], now, target)
                elif kind is _PEERS_ALERT:
                    target = target_of(alert.info_hash.to_bytes())
                    if target is not None:
                        target.last_activity = now
                        if target.lookups:
                            gather_peers(alert, target.lookups)
                elif kind is _STATS_ALERT:
                    self._on_stats(alert)
                elif kind is _BOOTSTRAP_ALERT:
                    self._bootstrapped.set()
                elif kind is _SAMPLE_ALERT:
                    self.samples.append((tuple(alert.endpoint), alert.interval.total_seconds(),
                                         [h.to_bytes().hex() for h in alert.samples],
                                         [tuple(n["endpoint"]) for n in alert.nodes]))
                    self.sampled.set()
            except Exception:  # noqa: BLE001 (one bad alert must not stop the others)
                gevent.get_hub().handle_error(None, *sys.exc_info())

    def _on_stats(self, alert) -> None:
        values = alert.values
        self._stats.on_alert(values)
        if values.get("dht.dht_nodes", 0) > 0:
            self._bootstrapped.set()

    def _on_tick(self) -> None:
        """Every TICK while lookups wait: wake those that settled or hit their deadline."""
        now = time.monotonic()
        settle = self.settle
        for lk in self._live:
            if now >= lk.deadline or now >= lk.target.last_activity + settle:
                lk.event.set()

    def _unregister(self, target: Group) -> None:
        """The pacer retired the traversals of ``target``'s info-hash."""
        assert isinstance(target, Target)  # the groups this pacer is handed are the lookups' Targets
        self._targets.pop(target.key, None)

    # --- greenlet side ------------------------------------------------------

    def _snapshot(self, result, timeout: float) -> dict | None:
        """The counters of a stats request, or None if they did not come in time."""
        try:
            return result.get(timeout=max(timeout, 0.001))
        except (gevent.Timeout, DhtClosed):
            return None

    def lookup(self, info_hash_hex: str) -> SourceResult:
        """Peers of one torrent from the DHT, as a ``SourceResult`` for "dht".

        Waits for a slot (at most ``dht_lookups_in_flight`` lookups at a time),
        then until ``max_peers`` peers, the traversal settles, or the
        ``dht_timeout`` deadline (counted from the call, slot wait included).
        Raises ``ValueError`` for a malformed info-hash; every network
        outcome is a result, failed ones with ``ok=False``; the observer is told each.
        """
        result = self._lookup_in_slot(info_hash_hex)
        self.observer.looked_up(result)
        return result

    def _lookup_in_slot(self, info_hash_hex: str) -> SourceResult:
        target = bytes.fromhex(info_hash_hex)
        if len(target) != 20:
            raise ValueError(f"info-hash must be 40 hex digits, got {info_hash_hex!r}")
        deadline = time.monotonic() + self.timeout
        if not self._in_flight.acquire(timeout=self.timeout):
            return self._failed(f"no free DHT lookup slot within {self.timeout:g}s")
        try:
            return self._lookup(target, deadline)
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the DHT side raises is this source's failure
            return self._failed(f"{type(e).__name__}: {e}")
        finally:
            self._in_flight.release()

    def _lookup(self, target: bytes, deadline: float) -> SourceResult:
        refused = self._refusal(deadline)
        if refused is not None:
            return refused
        # Baseline counters, taken by libtorrent before the traversal starts
        # (posted calls run in order); only read if no peer comes back.
        before = self._stats.baseline(self._session)
        lk = self._traverse(target, deadline)
        if self._closed:
            return self._failed("DHT source closed")
        if lk.peers:
            return SourceResult(source=SOURCE, ok=True, peers=frozenset(lk.peers), max_peers=self.max_peers)
        return self._without_peers(lk, before, deadline)

    def _refusal(self, deadline: float) -> SourceResult | None:
        """Why no traversal may start before ``deadline`` (closed, no bootstrap, paced), or None."""
        if self._closed:
            return self._failed("DHT source closed")
        if not self._bootstrapped.is_set():
            # Just started: the bootstrap alert, or counters showing routing table nodes, set the
            # event. The counters are asked again each second while a lookup waits: libtorrent's
            # bootstrap can end long after its table holds nodes (a node that lists the crawler's
            # own contact, as bittorrent-dht does, costs a query to itself and its 15 s timeout).
            # Once one lookup waited its whole deadline for a bootstrap (offline, or no router
            # resolves), the next ones wait a second each rather than holding every visit that long.
            wait = max(deadline - time.monotonic(), 0)
            until = time.monotonic() + (min(wait, 1.0) if self._unbooted else wait)
            while not self._bootstrapped.is_set() and time.monotonic() < until:
                self._stats.baseline(self._session, max_age=1.0)
                self._bootstrapped.wait(timeout=min(until - time.monotonic(), 1.0))
            if not self._bootstrapped.is_set():
                self._unbooted = True
                return self._failed("DHT not bootstrapped: no nodes in its routing table (is this machine "
                                    "offline, or do its bootstrap routers not resolve?)")
        # An empty table after the bootstrap still gets a lookup: libtorrent
        # then asks the bootstrap routers, which it never puts in the table.
        if not self._pacer.ready(time.monotonic()) and not self._gate.wait(deadline):
            if self._closed:
                return self._failed("DHT source closed")
            return self._failed(
                f"paced: no DHT lookup could start within {self.timeout:g}s without sending a node more than "
                f"{self.settings.dht_node_rate:g} queries/s"
            )
        return None

    def _traverse(self, target: bytes, deadline: float) -> Lookup:
        """Start a get_peers traversal of ``target``; return the lookup once ``_wait`` is over."""
        now = time.monotonic()
        group = self._targets.get(target)
        if group is None:
            group = self._targets[target] = Target(target, now)
        group.last_activity = now
        lk = Lookup(group, self.max_peers, deadline)
        group.lookups.append(lk)
        self._pacer.start(group)
        live = self._live
        live.add(lk)
        if len(live) == 1:
            self._ticker.start(self._on_tick)
        try:
            self._session.dht_get_peers(lt.sha1_hash(target))
            if self.requests is not None:  # what the crawl costs the DHT: one traversal
                self.requests.lookup()
            self._wait(lk, deadline)
        finally:
            live.discard(lk)
            if not live:
                self._ticker.stop()
            group.lookups.remove(lk)
            self._pacer.end(group)
            self._gate.wake()
        return lk

    def _without_peers(self, lk: Lookup, before, deadline: float) -> SourceResult:
        """A lookup that gathered no peers answered only if some DHT node responded meanwhile.

        ``before``: the baseline counters' request. The snapshots may overrun
        the deadline by a little (they are local).
        """
        first = self._snapshot(before, max(deadline - time.monotonic(), 1.0))
        after = None if self._closed else self._snapshot(self._stats.post(self._session), 1.0)
        if self._closed:
            return self._failed("DHT source closed")
        if first is None or after is None:
            return self._failed("DHT session did not report its counters in time")
        if responses(after) > responses(first):
            return SourceResult(source=SOURCE, ok=True, peers=frozenset(), max_peers=self.max_peers)
        nodes = after.get("dht.dht_nodes", 0)
        queries = lk.target.queries - lk.queries_before
        return self._failed(f"no DHT node responded ({queries} queries sent, {nodes} nodes in routing table)")

    def _wait(self, lk: Lookup, deadline: float) -> None:
        """Sleep until the lookup has enough peers, settles, or hits the deadline."""
        while not self._closed and len(lk.peers) < lk.max_peers:
            now = time.monotonic()
            if now >= deadline or now >= lk.target.last_activity + self.settle:
                return
            lk.event.clear()
            lk.event.wait()  # set by peers, the ticker, or close

    def _failed(self, error: str) -> SourceResult:
        return SourceResult.failed(SOURCE, error, max_peers=self.max_peers)

    # --- status and shutdown --------------------------------------------

    @property
    def paced_lookups(self) -> int:
        """Lookups that had to wait for the pacer."""
        return self._gate.paced

    def contacts(self, info_hash_hex: str) -> list[tuple[str, int]]:
        """The nodes the latest traversals of the hash queried last, the nearest to it known here
        (``dht_lookups.CONTACTS`` at most; none once the pacer retired them): a DHT scrape starts there."""
        target = self._targets.get(bytes.fromhex(info_hash_hex))
        return [] if target is None else [(str(ip), int(port)) for ip, port in target.queried]

    def note_sent(self, ip: str) -> None:
        """A query of ours to ``ip`` outside libtorrent (a DHT scrape): counted by the pacer, so the
        node's budget covers both."""
        self._pacer.sent(ip, time.monotonic(), None)

    def sample(self, endpoint: tuple[str, int], target: bytes) -> None:
        """Ask the node at ``endpoint`` for a sample of the info-hashes it stores (BEP 51), near
        ``target``; its answer comes to ``samples``. Does nothing once closed."""
        if not self._closed:
            self._session.dht_sample_infohashes(endpoint, lt.sha1_hash(target))

    def dht_health(self) -> dict:
        """The node's health: ``{"nodes", "bootstrapped", "lookups_in_flight", "bootstrap_nodes", "paced_lookups"}``.

        Never waits: ``nodes`` comes from the latest counters seen, and a
        fresh read is requested for the next call.
        """
        latest = self._stats.latest or {}
        if not self._closed:
            self._stats.post(self._session)
        nodes = latest.get("dht.dht_nodes", 0)
        return {
            "nodes": nodes,
            "bootstrapped": self._bootstrapped.is_set() or nodes > 0,
            "lookups_in_flight": len(self._live),
            "bootstrap_nodes": len(self.bootstrap),
            "paced_lookups": self.paced_lookups,
        }

    def close(self) -> None:
        """End the session: wake waiting lookups (they fail), stop alerts, free libtorrent.

        Safe to call twice.
        """
        if self._closed:
            return
        self._closed = True
        self._pump.close()
        self._ticker.stop()
        self._ticker.close()
        self._stats.fail_all(DhtClosed("DHT source closed"))
        for lk in self._live:
            lk.event.set()
        self._gate.close()
        # The destructor waits for libtorrent's threads; none of them needs
        # the GIL any more (see dht_alerts), so this takes milliseconds.
        session, self._session = self._session, None
        del session
        log.info("dht_closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
