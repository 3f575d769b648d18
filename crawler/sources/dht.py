"""The Mainline DHT as a peer source (SPEC §3), through one libtorrent session.

Strategy: one ``libtorrent.session`` per worker process runs the DHT only (no
torrents). Every greenlet calls ``DhtSource.lookup(info_hash_hex)``, which
starts a ``get_peers`` traversal (``session.dht_get_peers``, asynchronous) and
sleeps on a gevent event. Alerts reach the hub through ``AlertPump`` (a pipe
libtorrent writes to, watched by the hub: no polling, nothing that waits
inside libtorrent), and are routed by info-hash:

- ``dht_get_peers_reply_alert``: a node answered with peers; they are added
  to every lookup of that info-hash.
- ``dht_outgoing_get_peers_alert``: the traversal sent another query; the
  lookup is still making progress.

libtorrent posts no "lookup finished" alert for ``dht_get_peers``, so a lookup
ends at the first of: ``max_peers`` peers gathered, no new query sent for
``settle`` seconds (the traversal is over or only waits on dead nodes, which
would cost the full query timeout), or the ``dht_timeout`` deadline.

Answered or failed: a lookup that gathered peers answered. One that gathered
none answered only if DHT nodes responded while it ran: the session's counters
(``dht_messages_in`` minus incoming queries) are read before the query
(libtorrent handles posted calls in order, so a snapshot posted first precedes
the traversal; one at most 0.25 s old is shared) and again at the end. No response at all, an empty routing table or
a bootstrap that never finished make the result ``failed``, never "0 peers" —
a crawler that lost its network must not decay the catalogue (SPEC §1).
"""

from __future__ import annotations

import ipaddress
import time

import gevent
import libtorrent as lt
from gevent.event import Event
from gevent.lock import BoundedSemaphore

from crawler import logs
from crawler.errors import PeercrawlError
from crawler.settings import Settings
from crawler.sources.dht_alerts import AlertPump, StatsRequests
from crawler.sources.dht_session import ip_filter, resolve_bootstrap, session_params
from crawler.sources.result import SourceResult

log = logs.get(__name__)

SOURCE = "dht"

# Incoming queries counted in dht_messages_in; the rest are responses.
_QUERY_COUNTERS = (
    "dht.dht_ping_in", "dht.dht_find_node_in", "dht.dht_get_peers_in", "dht.dht_announce_peer_in",
    "dht.dht_get_in", "dht.dht_put_in", "dht.dht_sample_infohashes_in",
)


class DhtClosed(PeercrawlError):
    """The DHT source was closed while a lookup waited."""


def _responses(values: dict) -> int:
    return values.get("dht.dht_messages_in", 0) - sum(values.get(k, 0) for k in _QUERY_COUNTERS)


def _canonical(ip: str) -> str:
    return str(ipaddress.ip_address(ip)) if ":" in ip else ip


class _Lookup:
    """One greenlet's pending lookup; mutated only by the hub's dispatcher."""

    __slots__ = ("peers", "event", "last_activity", "queries", "max_peers")

    def __init__(self, max_peers: int):
        self.peers: set[tuple[str, int]] = set()
        self.event = Event()
        self.last_activity = time.monotonic()
        self.queries = 0
        self.max_peers = max_peers


class DhtSource:
    """The worker process's DHT node, shared by all its greenlets.

    ``settings``: dht_listen, dht_bootstrap, dht_upload_rate_limit,
    dht_lookups_in_flight, dht_timeout, dht_max_peers, allow_private are used.
    ``settle``: seconds without a new query after which a lookup is over.
    ``read_only``: run as a BEP 43 read-only node (see dht_session).
    ``extra``: libtorrent settings overriding ours (tests and benchmarks).

    Raises ``AddressRefused`` if a bootstrap node is not public and private
    addresses are not allowed. Call from a greenlet of the hub that will run
    the lookups.
    """

    def __init__(self, settings: Settings, settle: float = 2.0, read_only: bool = True, extra: dict | None = None):
        self.settings = settings
        self.max_peers = settings.dht_max_peers
        self.timeout = settings.dht_timeout
        self.settle = settle
        self.bootstrap = resolve_bootstrap(settings.dht_bootstrap, settings.allow_private)
        params = session_params(settings, self.bootstrap, read_only)
        params.update(extra or {})
        self._session = lt.session(params)
        self._session.set_ip_filter(ip_filter(settings.allow_private))
        self._lookups: dict[bytes, list[_Lookup]] = {}
        self._in_flight = BoundedSemaphore(settings.dht_lookups_in_flight)
        self._stats = StatsRequests()
        self._bootstrapped = Event()
        self._closed = False
        self._dispatch_table = {
            lt.dht_get_peers_reply_alert: self._on_peers,
            lt.dht_outgoing_get_peers_alert: self._on_query,
            lt.session_stats_alert: self._on_stats,
            lt.dht_bootstrap_alert: self._on_bootstrap,
        }
        self._pump = AlertPump(self._session, self._dispatch)
        log.info("dht_started", listen=params["listen_interfaces"], bootstrap=len(self.bootstrap))

    # --- hub side: never switches -----------------------------------------

    def _dispatch(self, alert) -> None:
        handler = self._dispatch_table.get(type(alert))
        if handler is not None:
            handler(alert)

    def _on_peers(self, alert) -> None:
        waiting = self._lookups.get(alert.info_hash.to_bytes())
        if not waiting:
            return
        peers = [(_canonical(ip), port) for ip, port in alert.peers()]
        now = time.monotonic()
        for lk in waiting:
            lk.peers.update(peers)
            lk.last_activity = now
            lk.event.set()

    def _on_query(self, alert) -> None:
        waiting = self._lookups.get(alert.info_hash.to_bytes())
        if waiting:
            now = time.monotonic()
            for lk in waiting:
                lk.queries += 1
                lk.last_activity = now

    def _on_stats(self, alert) -> None:
        values = alert.values
        self._stats.on_alert(values)
        if values.get("dht.dht_nodes", 0) > 0:
            self._bootstrapped.set()

    def _on_bootstrap(self, alert) -> None:
        self._bootstrapped.set()

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
        outcome is a result, failed ones with ``ok=False``.
        """
        target = bytes.fromhex(info_hash_hex)
        if len(target) != 20:
            raise ValueError(f"info-hash must be 40 hex digits, got {info_hash_hex!r}")
        deadline = time.monotonic() + self.timeout
        if not self._in_flight.acquire(timeout=self.timeout):
            return self._failed(f"no free DHT lookup slot within {self.timeout:g}s")
        try:
            return self._lookup(target, deadline)
        finally:
            self._in_flight.release()

    def _lookup(self, target: bytes, deadline: float) -> SourceResult:
        if self._closed:
            return self._failed("DHT source closed")
        if not self._bootstrapped.is_set():
            # Just started: the bootstrap alert, or counters showing routing
            # table nodes, set the event.
            self._stats.post(self._session)
            if not self._bootstrapped.wait(timeout=max(deadline - time.monotonic(), 0)):
                return self._failed(f"DHT not bootstrapped within {self.timeout:g}s: no nodes in its routing table")
        # An empty table after the bootstrap still gets a lookup: libtorrent
        # then asks the bootstrap routers, which it never puts in the table.

        # Baseline counters, taken by libtorrent before the traversal starts
        # (posted calls run in order); only read if no peer comes back.
        before = self._stats.baseline(self._session)
        lk = _Lookup(self.max_peers)
        self._lookups.setdefault(target, []).append(lk)
        try:
            self._session.dht_get_peers(lt.sha1_hash(target))
            self._wait(lk, deadline)
        finally:
            waiting = self._lookups.get(target)
            if waiting is not None:
                waiting.remove(lk)
                if not waiting:
                    del self._lookups[target]
        if self._closed:
            return self._failed("DHT source closed")
        if lk.peers:
            return SourceResult(source=SOURCE, ok=True, peers=frozenset(lk.peers), max_peers=self.max_peers)
        # No peers: answered only if some DHT node responded meanwhile. The
        # snapshots may overrun the deadline by a little (they are local).
        first = self._snapshot(before, max(deadline - time.monotonic(), 1.0))
        after = None if self._closed else self._snapshot(self._stats.post(self._session), 1.0)
        if self._closed:
            return self._failed("DHT source closed")
        if first is None or after is None:
            return self._failed("DHT session did not report its counters in time")
        if _responses(after) > _responses(first):
            return SourceResult(source=SOURCE, ok=True, peers=frozenset(), max_peers=self.max_peers)
        nodes = after.get("dht.dht_nodes", 0)
        return self._failed(f"no DHT node responded ({lk.queries} queries sent, {nodes} nodes in routing table)")

    def _wait(self, lk: _Lookup, deadline: float) -> None:
        """Sleep until the lookup has enough peers, settles, or hits the deadline."""
        while not self._closed and len(lk.peers) < lk.max_peers:
            now = time.monotonic()
            settle_at = lk.last_activity + self.settle
            if now >= deadline or now >= settle_at:
                return
            lk.event.clear()
            lk.event.wait(timeout=min(deadline, settle_at) - now)

    def _failed(self, error: str) -> SourceResult:
        return SourceResult.failed(SOURCE, error, max_peers=self.max_peers)

    # --- status and shutdown --------------------------------------------

    def dht_health(self) -> dict:
        """``{"nodes", "bootstrapped", "lookups_in_flight", "bootstrap_nodes"}`` for status.

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
            "lookups_in_flight": sum(len(v) for v in self._lookups.values()),
            "bootstrap_nodes": len(self.bootstrap),
        }

    def close(self) -> None:
        """End the session: wake waiting lookups (they fail), stop alerts, free libtorrent.

        Safe to call twice.
        """
        if self._closed:
            return
        self._closed = True
        self._pump.close()
        self._stats.fail_all(DhtClosed("DHT source closed"))
        for waiting in list(self._lookups.values()):
            for lk in waiting:
                lk.event.set()
        # The destructor waits for libtorrent's threads; none of them needs
        # the GIL any more (see dht_alerts), so this takes milliseconds.
        session, self._session = self._session, None
        del session
        log.info("dht_closed")

    def __enter__(self) -> "DhtSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
