"""A torrent's info dictionary fetched from its peers (BEP 9/10 ``ut_metadata``), over TCP and uTP at once.

What it is for: a torrent the crawler was handed without a name (a bare
info-hash, a magnet without ``dn=``, one the DHT sampled) gets one from the
peers already found for it. Opt-in (``PEERCRAWL_METADATA``): this is the
only part of the crawler that connects to peers (docs/metadata.md says what
a peer then learns).

Strategy: two ``libtorrent.session`` per ``MetadataFetcher``, one for TCP and
one for uTP (not the DHT's; ``metadata_session`` says why two, how they are
set up and which flags keep payload off). ``fetch(info_hash_hex, peers)``
runs in the calling greenlet:

1. The peers are checked against the address policy and cut to
   ``PEERS_PER_FETCH`` (``metadata_session.handed_peers``); the fetch
   takes one of ``metadata_in_flight`` slots (a gevent semaphore),
   waiting for one until its deadline.
2. The sessions' IP filter is set to allow the addresses of the peers of
   every fetch in flight, this one's included, and no other
   (``metadata_session.allow_only``): whatever a peer names (a holepunch
   ``connect``, peer exchange), libtorrent connects to those only. The
   fetch adds a magnet of the info-hash with its peers to each session
   (``async_add_torrent``: nothing waits inside libtorrent; the filter is
   in before the torrent), so each peer is tried over TCP and over uTP at
   once, and sleeps on a gevent event until the deadline.
3. Alerts reach the hub through ``dht_alerts.AlertPump`` (a pipe libtorrent
   writes to, watched by the hub; one per session) and are routed to the
   fetch by v1 info-hash. The first ``metadata_received_alert``, from
   either session, asks for the info dictionary (``save_resume_data`` with
   ``save_info_dict``, answered by an alert, so the hub never waits on
   libtorrent's thread); its answer wakes the fetch.
   A ``metadata_failed_alert`` (metadata that did not hash to the
   info-hash: libtorrent discards it and asks again) is counted. A peer
   dropped is not given up on before the deadline: libtorrent tries it
   again (in plain text after an encrypted handshake was refused, on its
   own schedule after a timeout).
4. It removes its torrents at once (files kept: none was written), whatever
   the outcome; a torrent whose add had not come back yet is removed when
   it does. When libtorrent reports them removed from every session, the
   slot is freed and the filter narrowed to the fetches still in flight: a
   session never holds more torrents than there are slots.
5. The info dictionary is read by ``metadata_info.read_info``: its SHA-1
   checked against the info-hash again, then bounded bencode, in slices
   of a millisecond or two with a ``PAUSE`` between them, so that the
   worst metadata (about a second of one core) never holds the hub.

Outcomes: a ``TorrentInfo`` or a ``NoMetadata`` whose ``kind`` says why
(``metadata_outcomes.KINDS``), for the caller's retry schedule. Only a
malformed info-hash raises.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import Self

import gevent
import libtorrent as lt
from gevent.lock import BoundedSemaphore

from crawler import logs
from crawler.errors import one_line
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.dht_alerts import AlertPump, StatsRequests
from crawler.sources.metadata.metadata_info import InfoError, InfoMismatch, TorrentInfo, read_info
from crawler.sources.metadata.metadata_outcomes import KINDS, Fetch, NoMetadata, failure
from crawler.sources.metadata.metadata_session import allow_only, handed_peers, magnet_params, new_session, transports

log = logs.get(__name__)

# Between two slices of a read (metadata_info): a timer, so the hub polls its sockets and runs its timers
# first (after a zero sleep it would only run the greenlets ready, and ~50 slices could pass in a row).
PAUSE = 0.001

# At close: how often the uTP session's open sockets are counted, and how long past its connect timeout they
# are waited for.
DRAIN_POLL, DRAIN_SLACK = 0.1, 1.0
UTP_OPEN = ("peer.num_utp_peers", "utp.num_utp_idle", "utp.num_utp_syn_sent", "utp.num_utp_connected",
            "utp.num_utp_fin_sent", "utp.num_utp_close_wait", "utp.num_utp_deleted")

__all__ = ["KINDS", "MetadataFetcher", "NoMetadata"]


def _key(handle) -> bytes:
    """The v1 info-hash of a torrent's handle (20 zero bytes once the torrent is gone)."""
    return handle.info_hashes().v1.to_bytes()


class MetadataFetcher:
    """The worker process's metadata fetcher, shared by its greenlets.

    ``settings``: metadata_listen, metadata_in_flight, metadata_timeout and
    allow_private are used (``metadata`` is the caller's to check).
    ``extra``: libtorrent settings overriding ours (tests). Nothing is ever
    written under ``save_path``, a directory of its own that ``close``
    removes. Call from a greenlet of the hub that will run the fetches.
    """

    def __init__(self, settings: Settings, extra: dict | None = None):
        self.timeout = settings.metadata_timeout
        self.allow_private = settings.allow_private
        self.save_path = tempfile.mkdtemp(prefix="peercrawl-metadata-")
        # transport -> its session (metadata_session.TRANSPORTS): a fetch's torrent is in each.
        self._sessions = {t: new_session(settings, extra, t) for t in transports(extra)}
        self._slots = BoundedSemaphore(settings.metadata_in_flight)
        self._fetches: dict[bytes, Fetch] = {}
        self._allowed: frozenset[str] = frozenset()  # the addresses the sessions' IP filter lets through
        self._stats = {t: StatsRequests() for t in self._sessions}
        self._closed = False
        self.outcomes: Counter[str] = Counter()  # "ok" or a NoMetadata kind -> fetches
        self.peak = 0  # most torrents in a session at once
        self._handlers = {
            lt.add_torrent_alert: self._on_added,
            lt.torrent_removed_alert: self._on_removed,
            lt.metadata_received_alert: self._on_metadata,
            lt.save_resume_data_alert: self._on_info,
            lt.save_resume_data_failed_alert: self._on_info_failed,
            lt.metadata_failed_alert: self._on_bad_metadata,
            lt.peer_connect_alert: self._on_connect,
            lt.peer_disconnected_alert: self._on_dropped,
            lt.peer_blocked_alert: self._on_dropped,
            lt.session_stats_alert: self._on_stats,
            lt.listen_failed_alert: self._on_listen_failed,
        }
        self._pumps = [AlertPump(session, partial(self._dispatch, t)) for t, session in self._sessions.items()]
        log.info("metadata_fetcher_started", listen=listen_text(settings.metadata_listen),
                 in_flight=settings.metadata_in_flight, transports=",".join(self._sessions))

    # --- hub side: never switches -----------------------------------------

    def _dispatch(self, transport: str, alerts: list) -> None:
        """Handle one batch of alerts of ``transport``'s session (AlertPump); runs in the hub."""
        handlers = self._handlers
        for alert in alerts:
            handler = handlers.get(type(alert))
            if handler is None:
                continue
            try:
                handler(transport, alert)
            except Exception:  # noqa: BLE001 (one bad alert must not stop the others)
                gevent.get_hub().handle_error(None, *sys.exc_info())

    def _fetch_of(self, alert) -> Fetch | None:
        return self._fetches.get(_key(alert.handle))

    def _on_added(self, transport: str, alert) -> None:
        f = self._fetches.get(alert.params.info_hashes.v1.to_bytes())
        if f is None:
            return
        if alert.error.value():
            f.error = f"libtorrent refused the torrent: {alert.error.message()}"
            self._out(f, transport)
            return
        f.handles[transport] = alert.handle
        session = self._sessions.get(transport)
        if f.done and session is not None:
            session.remove_torrent(alert.handle)

    def _on_removed(self, transport: str, alert) -> None:
        f = self._fetches.get(alert.info_hashes.v1.to_bytes())
        if f is not None and f.done:
            self._out(f, transport)

    def _out(self, f: Fetch, transport: str) -> None:
        """The torrent of ``f`` is out of ``transport``'s session (or never got in). Once it is out of every
        session: a fetch still waiting ends (none of its torrents runs), and its slot is free."""
        f.out.add(transport)
        if f.all_out():
            f.event.set()
            self._retire(f)

    def _retire(self, f: Fetch) -> None:
        """The torrents of ``f`` are out of the sessions (or never got in): free its slot, and its peers'
        addresses unless another fetch has them."""
        if self._fetches.get(f.info_hash) is f:
            del self._fetches[f.info_hash]
            self._allow()
            self._slots.release()
            f.retired.set()

    def _allow(self) -> None:
        """Set the sessions' IP filter to allow the addresses of the fetches' peers, and only them."""
        allowed = frozenset(ip for f in self._fetches.values() for ip, _ in f.given)
        if allowed != self._allowed and not self._closed:
            rules = allow_only(allowed, self.allow_private)
            for session in self._sessions.values():
                session.set_ip_filter(rules)
            self._allowed = allowed

    def _on_metadata(self, _transport: str, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None and not f.done and not f.asked:  # the first session to have it is asked
            f.received = f.asked = True
            alert.handle.save_resume_data(lt.torrent_handle.save_info_dict)

    def _on_info(self, _transport: str, alert) -> None:
        f = self._fetch_of(alert)
        ti = alert.params.ti
        if f is not None and ti is not None:
            f.info = bytes(ti.info_section())
            f.event.set()

    def _on_info_failed(self, _transport: str, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None:
            f.error = f"libtorrent could not hand the metadata over: {alert.error.message()}"
            f.event.set()

    def _on_bad_metadata(self, _transport: str, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None:
            f.bad_metadata += 1

    def _on_connect(self, transport: str, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None:
            f.live.add((transport, tuple(alert.endpoint)))

    def _on_dropped(self, transport: str, alert) -> None:
        f = self._fetch_of(alert)
        if f is None:
            return
        endpoint = tuple(alert.endpoint)
        f.live.discard((transport, endpoint))
        if endpoint in f.given:
            f.dropped[(transport, endpoint)] = one_line(alert.message(), 160)
        elif isinstance(alert, lt.peer_blocked_alert):
            f.refused += 1

    def _on_stats(self, transport: str, alert) -> None:
        self._stats[transport].on_alert(alert.values)

    def _on_listen_failed(self, _transport: str, alert) -> None:
        log.warning("metadata_listen_failed", message=one_line(alert.message(), 200))

    # --- greenlet side ------------------------------------------------------

    def fetch(self, info_hash_hex: str, peers: Iterable[tuple[str, int]]) -> TorrentInfo | NoMetadata:
        """The info dictionary of the torrent ``info_hash_hex`` (v1, 40 hex digits), asked of ``peers``.

        ``peers``: (ip, port) pairs; those the address policy refuses, with a
        port outside 1-65535 or not an IP are left out, the rest cut to
        ``PEERS_PER_FETCH``. Waits for a slot, then for the metadata, until
        ``metadata_timeout`` seconds from the call. Raises ``ValueError`` for
        a malformed info-hash; every other outcome is returned.
        """
        info_hash = bytes.fromhex(info_hash_hex)
        if len(info_hash) != 20:
            raise ValueError(f"info-hash must be 40 hex digits, got {info_hash_hex!r}")
        deadline = time.monotonic() + self.timeout
        given, refused = handed_peers(peers, self.allow_private)
        if not given:
            return self._no("no_peers", f"no peer to ask ({refused} refused by the address policy or malformed)")
        refusal = self._refusal(info_hash, deadline)
        if refusal is not None:
            return refusal
        if not self._slots.acquire(timeout=max(deadline - time.monotonic(), 0)):
            return self._no("no_slot", f"no free metadata fetch slot within {self.timeout:g}s")
        refusal = self._refusal(info_hash, deadline)
        if refusal is not None:
            self._slots.release()
            return refusal
        f = self._fetches[info_hash] = Fetch(info_hash, given, tuple(self._sessions))
        self.peak = max(self.peak, len(self._fetches))
        self._allow()
        for transport, session in self._sessions.items():
            try:
                session.async_add_torrent(magnet_params(info_hash, given, self.save_path))
            except Exception as e:  # noqa: BLE001 - not added there: the other session may have it
                f.error = f"libtorrent refused the torrent: {one_line(str(e), 200)}"
                f.out.add(transport)
        if f.all_out():  # added nowhere: the slot is free again
            self._retire(f)
            return self._no("error", f.error or "libtorrent refused the torrent")
        try:
            f.event.wait(timeout=max(deadline - time.monotonic(), 0))
        finally:
            f.done = True
            for transport, handle in f.handles.items():
                if not self._closed:
                    self._sessions[transport].remove_torrent(handle)
        return self._outcome(f)

    def _refusal(self, info_hash: bytes, deadline: float) -> NoMetadata | None:
        """Why this fetch may not add its torrent now (closed, another fetch of it running), or None.

        A fetch of the same torrent that is over but whose torrent libtorrent
        has not removed yet (milliseconds) is waited for, until ``deadline``.
        """
        while not self._closed:
            other = self._fetches.get(info_hash)
            if other is None:
                return None
            if not other.done or not other.retired.wait(timeout=max(deadline - time.monotonic(), 0)):
                return self._no("busy", "this torrent's metadata is already being fetched")
        return self._no("closed", "metadata fetcher closed")

    def _outcome(self, f: Fetch) -> TorrentInfo | NoMetadata:
        if f.info is not None:
            try:
                got = read_info(f.info_hash, f.info, pause=partial(gevent.sleep, PAUSE))
            except InfoMismatch as e:
                return self._no("bad_metadata", str(e))
            except InfoError as e:
                return self._no("malformed", str(e))
            self.outcomes["ok"] += 1
            return got
        if self._closed:
            return self._no("closed", "metadata fetcher closed")
        failed = failure(f, self.timeout)
        return self._no(failed.kind, failed.reason)

    def _no(self, kind: str, reason: str) -> NoMetadata:
        self.outcomes[kind] += 1
        return NoMetadata(kind, reason)

    # --- reports and lifetime ----------------------------------------------

    def counters(self, timeout: float = 5.0) -> dict | None:
        """The sessions' counters by libtorrent's names (``net.recv_payload_bytes``,
        ``net.sent_payload_bytes``, ...), summed, or None if they did not come within ``timeout`` s."""
        if self._closed:
            return None
        summed: Counter[str] = Counter()
        try:
            for t, session in self._sessions.items():
                summed.update(self._stats[t].post(session).get(timeout=timeout))
        except gevent.Timeout:
            return None
        return dict(summed)

    def stats(self) -> dict:
        """Torrents in the sessions now and at most, and fetches by outcome ("ok" or a ``KINDS`` key)."""
        return {"torrents": len(self._fetches), "peak": self.peak, "outcomes": dict(self.outcomes)}

    def close(self) -> None:
        """End the sessions: wake waiting fetches (they end "closed"), let the uTP connections still open end
        (``_drain``), stop alerts, free libtorrent, remove the save path. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for f in list(self._fetches.values()):
            f.event.set()
            f.retired.set()
        for session in self._sessions.values():
            session.pause()
        self._drain()
        for pump in self._pumps:
            pump.close()
        for stats in self._stats.values():
            stats.fail_all(gevent.Timeout())
        sessions, self._sessions = self._sessions, {}
        sessions.clear()
        try:
            os.rmdir(self.save_path)
        except OSError as e:
            # Never expected: nothing is downloaded. Kept for a look, and said.
            log.warning("metadata_save_path_not_empty", path=self.save_path, error=str(e),
                        entries=len(os.listdir(self.save_path)) if os.path.isdir(self.save_path) else 0)
        log.info("metadata_fetcher_closed", outcomes=dict(self.outcomes))

    def _drain(self) -> None:
        """Wait, in this greenlet, until the uTP session has no socket open, for at most its connect timeout
        and ``DRAIN_SLACK``: libtorrent's destructor waits for each, holding the GIL (the hub and every
        thread stop), and a uTP connect to a peer that does not speak uTP lives until its timeout (3 s),
        whenever its fetch ended."""
        session = self._sessions.get("utp")
        if session is None:
            return
        end = time.monotonic() + session.get_settings()["utp_connect_timeout"] / 1000 + DRAIN_SLACK
        while time.monotonic() < end:
            try:
                values = self._stats["utp"].post(session).get(timeout=max(end - time.monotonic(), 0))
            except gevent.Timeout:
                return
            assert values is not None  # a stats request is answered with the counters
            if not any(values.get(name, 0) for name in UTP_OPEN):
                return
            gevent.sleep(DRAIN_POLL)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
