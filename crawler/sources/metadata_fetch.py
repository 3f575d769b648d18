"""A torrent's info dictionary fetched from its peers (BEP 9/10 ``ut_metadata``), through one libtorrent session.

What it is for: a torrent the crawler was handed without a name (a bare
info-hash, a magnet without ``dn=``, one the DHT sampled) gets one from the
peers already found for it. Opt-in (``PEERCRAWL_METADATA``): this is the
only part of the crawler that connects to peers (docs/metadata.md says what
a peer then learns).

Strategy: one ``libtorrent.session`` per ``MetadataFetcher`` (not the DHT's;
``metadata_session`` says how it is set up and which flags keep payload
off). ``fetch(info_hash_hex, peers)`` runs in the calling greenlet:

1. The peers are checked against the address policy and cut to
   ``PEERS_PER_FETCH`` (``metadata_session.handed_peers``); the fetch
   takes one of ``metadata_in_flight`` slots (a gevent semaphore),
   waiting for one until its deadline.
2. The session's IP filter is set to allow the addresses of the peers of
   every fetch in flight, this one's included, and no other
   (``metadata_session.allow_only``): whatever a peer names (a holepunch
   ``connect``, peer exchange), libtorrent connects to those only. The
   fetch adds a magnet of the info-hash with its peers
   (``async_add_torrent``: nothing waits inside libtorrent; the filter is
   in before the torrent) and sleeps on a gevent event until the deadline.
3. Alerts reach the hub through ``dht_alerts.AlertPump`` (a pipe libtorrent
   writes to, watched by the hub) and are routed to the fetch by v1
   info-hash. ``metadata_received_alert`` asks for the info dictionary
   (``save_resume_data`` with ``save_info_dict``, answered by an alert, so
   the hub never waits on libtorrent's thread); its answer wakes the fetch.
   A ``metadata_failed_alert`` (metadata that did not hash to the
   info-hash: libtorrent discards it and asks again) is counted. A peer
   dropped is not given up on before the deadline: libtorrent tries it
   again (over TCP after uTP failed, in plain text after an encrypted
   handshake was refused, on its own schedule after a timeout).
4. It removes the torrent at once (files kept: none was written), whatever
   the outcome; a torrent whose add had not come back yet is removed when
   it does. When libtorrent reports it removed, the slot is freed and the
   filter narrowed to the fetches still in flight: the session never holds
   more torrents than there are slots.
5. The info dictionary is read by ``metadata_info.read_info``: its SHA-1
   checked against the info-hash again, then bounded bencode, in slices
   of a millisecond or two with a ``PAUSE`` between them, so that the
   worst metadata (about a second of one core) never holds the hub.

Outcomes: a ``TorrentInfo`` or a ``NoMetadata`` whose ``kind`` says why
(``KINDS``), for the caller's retry schedule. Only a malformed info-hash
raises.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Self

import gevent
import libtorrent as lt
from gevent.event import Event
from gevent.lock import BoundedSemaphore

from crawler import logs
from crawler.errors import one_line
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.dht_alerts import AlertPump, StatsRequests
from crawler.sources.metadata_info import InfoError, InfoMismatch, TorrentInfo, read_info
from crawler.sources.metadata_session import allow_only, handed_peers, magnet_params, new_session

log = logs.get(__name__)

# Between two slices of a read (metadata_info): a timer, so the hub polls its sockets and runs its timers
# first (after a zero sleep it would only run the greenlets ready, and ~50 slices could pass in a row).
PAUSE = 0.001

KINDS = {
    "no_peers": "no peer to ask: none given, or every one refused by the address policy",
    "busy": "a fetch of this torrent is already running in this process",
    "no_slot": "no free slot (PEERCRAWL_METADATA_IN_FLIGHT) before the deadline",
    "timeout": "no peer sent the metadata before the deadline",
    "unreachable": "at the deadline, every peer given had been dropped or blocked (none connected)",
    "bad_metadata": "metadata sent did not hash to the info-hash, and no peer sent the right one",
    "malformed": "the metadata hashed right but is not a usable info dictionary",
    "error": "libtorrent refused the torrent or could not hand its metadata over",
    "closed": "the fetcher was closed",
}


@dataclass(frozen=True)
class NoMetadata:
    """A fetch that brought no info dictionary: ``kind`` is a key of ``KINDS``, ``reason`` one line for a log."""

    kind: str
    reason: str


class Fetch:
    """One torrent in the session, from its add to its removal.

    ``live``: endpoints being connected or connected; ``dropped``: endpoint
    handed over -> why libtorrent dropped or blocked it; ``refused``: the
    endpoints peers named (holepunch) that the filter blocked.
    """

    __slots__ = ("info_hash", "given", "event", "retired", "handle", "received", "info", "error", "bad_metadata",
                 "live", "dropped", "refused", "done")

    def __init__(self, info_hash: bytes, given: list[tuple[str, int]]):
        self.info_hash, self.given = info_hash, given
        self.event = Event()
        self.retired = Event()  # its torrent is out of the session
        self.handle = None
        self.received = False  # libtorrent has the metadata
        self.info: bytes | None = None  # the bencoded info dictionary
        self.error: str | None = None
        self.bad_metadata = 0
        self.live: set[tuple] = set()
        self.dropped: dict[tuple, str] = {}
        self.refused = 0
        self.done = False  # the fetch stopped waiting: the torrent goes as soon as it is added

    def all_dropped(self) -> bool:
        """Every peer handed over was dropped or blocked and none is connected, and no metadata came."""
        return not self.received and not self.live and len(self.dropped) >= len(self.given)


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
        self._session = new_session(settings, extra)
        self._slots = BoundedSemaphore(settings.metadata_in_flight)
        self._fetches: dict[bytes, Fetch] = {}
        self._allowed: frozenset[str] = frozenset()  # the addresses the session's IP filter lets through
        self._stats = StatsRequests()
        self._closed = False
        self.outcomes: Counter[str] = Counter()  # "ok" or a NoMetadata kind -> fetches
        self.peak = 0  # most torrents in the session at once
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
        self._pump = AlertPump(self._session, self._dispatch)
        log.info("metadata_fetcher_started", listen=listen_text(settings.metadata_listen),
                 in_flight=settings.metadata_in_flight)

    # --- hub side: never switches -----------------------------------------

    def _dispatch(self, alerts: list) -> None:
        """Handle one batch of alerts (AlertPump); runs in the hub."""
        handlers = self._handlers
        for alert in alerts:
            handler = handlers.get(type(alert))
            if handler is None:
                continue
            try:
                handler(alert)
            except Exception:  # noqa: BLE001 (one bad alert must not stop the others)
                gevent.get_hub().handle_error(None, *sys.exc_info())

    def _fetch_of(self, alert) -> Fetch | None:
        return self._fetches.get(_key(alert.handle))

    def _on_added(self, alert) -> None:
        f = self._fetches.get(alert.params.info_hashes.v1.to_bytes())
        if f is None:
            return
        if alert.error.value():
            f.error = f"libtorrent refused the torrent: {alert.error.message()}"
            f.event.set()
            self._retire(f)
            return
        f.handle = alert.handle
        if f.done and self._session is not None:
            self._session.remove_torrent(alert.handle)

    def _on_removed(self, alert) -> None:
        f = self._fetches.get(alert.info_hashes.v1.to_bytes())
        if f is not None and f.done:
            self._retire(f)

    def _retire(self, f: Fetch) -> None:
        """The torrent of ``f`` is out of the session (or never got in): free its slot, and its peers'
        addresses unless another fetch has them."""
        if self._fetches.get(f.info_hash) is f:
            del self._fetches[f.info_hash]
            self._allow()
            self._slots.release()
            f.retired.set()

    def _allow(self) -> None:
        """Set the session's IP filter to allow the addresses of the fetches' peers, and only them."""
        allowed = frozenset(ip for f in self._fetches.values() for ip, _ in f.given)
        if allowed != self._allowed and self._session is not None:
            self._session.set_ip_filter(allow_only(allowed, self.allow_private))
            self._allowed = allowed

    def _on_metadata(self, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None and not f.done:
            f.received = True
            alert.handle.save_resume_data(lt.torrent_handle.save_info_dict)

    def _on_info(self, alert) -> None:
        f = self._fetch_of(alert)
        ti = alert.params.ti
        if f is not None and ti is not None:
            f.info = bytes(ti.info_section())
            f.event.set()

    def _on_info_failed(self, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None:
            f.error = f"libtorrent could not hand the metadata over: {alert.error.message()}"
            f.event.set()

    def _on_bad_metadata(self, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None:
            f.bad_metadata += 1

    def _on_connect(self, alert) -> None:
        f = self._fetch_of(alert)
        if f is not None:
            f.live.add(tuple(alert.endpoint))

    def _on_dropped(self, alert) -> None:
        f = self._fetch_of(alert)
        if f is None:
            return
        endpoint = tuple(alert.endpoint)
        f.live.discard(endpoint)
        if endpoint in f.given:
            f.dropped[endpoint] = one_line(alert.message(), 160)
        elif isinstance(alert, lt.peer_blocked_alert):
            f.refused += 1

    def _on_stats(self, alert) -> None:
        self._stats.on_alert(alert.values)

    def _on_listen_failed(self, alert) -> None:
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
        f = self._fetches[info_hash] = Fetch(info_hash, given)
        self.peak = max(self.peak, len(self._fetches))
        try:
            self._allow()
            self._session.async_add_torrent(magnet_params(info_hash, given, self.save_path))
        except Exception as e:  # noqa: BLE001 - nothing was added: the slot is free again
            self._retire(f)
            return self._no("error", f"libtorrent refused the torrent: {one_line(str(e), 200)}")
        try:
            f.event.wait(timeout=max(deadline - time.monotonic(), 0))
        finally:
            f.done = True
            if f.handle is not None and self._session is not None:
                self._session.remove_torrent(f.handle)
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
        if f.error is not None:
            return self._no("error", f.error)
        seen = f"{len(f.given)} peers given, {len(f.live)} connecting or connected, {len(f.dropped)} dropped or blocked"
        if f.dropped:
            seen += f", e.g. {next(iter(f.dropped.values()))}"
        if f.refused:
            seen += f"; {f.refused} endpoints named by peers refused"
        if f.bad_metadata:
            return self._no("bad_metadata", f"{f.bad_metadata} time(s) a peer sent metadata that did not hash to the "
                                            f"info-hash, and none sent the right one ({seen})")
        if f.all_dropped():
            return self._no("unreachable", f"no peer connected within {self.timeout:g}s ({seen})")
        return self._no("timeout", f"no peer sent the metadata within {self.timeout:g}s ({seen})")

    def _no(self, kind: str, reason: str) -> NoMetadata:
        self.outcomes[kind] += 1
        return NoMetadata(kind, reason)

    # --- reports and lifetime ----------------------------------------------

    def counters(self, timeout: float = 5.0) -> dict | None:
        """The session's counters by libtorrent's names (``net.recv_payload_bytes``,
        ``net.sent_payload_bytes``, ...), or None if they did not come within ``timeout`` s."""
        if self._closed:
            return None
        try:
            return self._stats.post(self._session).get(timeout=timeout)
        except gevent.Timeout:
            return None

    def stats(self) -> dict:
        """Torrents in the session now and at most, and fetches by outcome ("ok" or a ``KINDS`` key)."""
        return {"torrents": len(self._fetches), "peak": self.peak, "outcomes": dict(self.outcomes)}

    def close(self) -> None:
        """End the session: wake waiting fetches (they end "closed"), stop alerts, free libtorrent,
        remove the save path. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._pump.close()
        for f in list(self._fetches.values()):
            f.event.set()
            f.retired.set()
        self._stats.fail_all(gevent.Timeout())
        session, self._session = self._session, None
        del session
        try:
            os.rmdir(self.save_path)
        except OSError as e:
            # Never expected: nothing is downloaded. Kept for a look, and said.
            log.warning("metadata_save_path_not_empty", path=self.save_path, error=str(e),
                        entries=len(os.listdir(self.save_path)) if os.path.isdir(self.save_path) else 0)
        log.info("metadata_fetcher_closed", outcomes=dict(self.outcomes))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
