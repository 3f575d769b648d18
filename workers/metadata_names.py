"""Names from peers, in the worker: after a visit found peers for a torrent with no name, ask them (BEP 9).

``PEERCRAWL_METADATA=on`` only (docs/metadata.md: this is the one part of
the crawler that connects to peers). A visit that found peers offers them
here once it has completed; the fetch runs in a greenlet of its own, so no
visit or lease waits for it:

1. Nothing is started while ``PEERCRAWL_METADATA_IN_FLIGHT`` fetches of
   this process run, or while this torrent's does (an offer then is
   dropped: the next visit offers again).
2. ``TorrentMetadata.due``: only a tracked torrent with no name, no success
   yet and past its wait after failures (one read).
3. A place in the namespace's budget (``PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND``,
   kept as the announce cap is).
4. The fetch (``MetadataFetcher``), then one atomic step: ``found`` keeps the
   name (never over one ``add`` kept), size and file count; ``failed`` widens
   the wait. A fetch that found this torrent's fetch already running, or no
   free slot, changes nothing.

At shutdown (a signal, or ``--until-idle``'s end) running fetches get
``SHUTDOWN_GRACE`` seconds to finish before the fetcher is closed; a fetch
still waiting for its place in the budget then stops waiting. A fetch
the stop cuts short (it ends "closed") is logged (``metadata_fetch_cut``)
and noted as a cut, not a failure (``TorrentMetadata.cut``): the torrent is
due again within ``PEERCRAWL_RETRY_SECONDS`` (a failed visit's delay, not
its revisit), so a visit soon offers its peers again.
"""

from __future__ import annotations

import time

import gevent
from gevent.event import Event

from crawler import logs, spawning
from crawler.errors import StoreError
from crawler.queue.torrent_metadata import TorrentMetadata
from crawler.sources.metadata.metadata_info import TorrentInfo

log = logs.get("worker.metadata")

# Outcomes that say nothing about the torrent: not counted as its failures ("closed": a cut, noted apart).
NOT_ITS_FAILURE = frozenset({"closed", "busy", "no_slot"})
SHUTDOWN_GRACE = 5.0


class MetadataNames:
    """The process's fetches of torrents' metadata (module note)."""

    def __init__(self, settings, fetcher, state: TorrentMetadata, budget):
        self.settings, self.fetcher, self.state, self.budget = settings, fetcher, state, budget
        self.running: dict[str, gevent.Greenlet] = {}
        self.found = self.failed = self.cut = 0
        self.closing = Event()  # set once the grace is over: no fetch starts, a wait for a budget place ends

    def offer(self, info_hash: str, peers) -> None:
        """A visit of ``info_hash`` found ``peers`` ((ip, port) pairs): fetch its metadata if it is due."""
        if self.closing.is_set() or info_hash in self.running or len(self.running) >= self.settings.metadata_in_flight:
            return
        self.running[info_hash] = spawning.spawn(self._fetch, info_hash, list(peers))

    def _fetch(self, h: str, peers: list) -> None:
        started = time.monotonic()
        try:
            if not self.state.due(h, time.time()):
                return
            wait = self.budget.wait()
            got = None if self.closing.wait(timeout=wait) else self.fetcher.fetch(h, peers)
            if isinstance(got, TorrentInfo):
                self.state.found(h, got.name, got.total_size, got.file_count, time.time())
                self.found += 1
                log.info("metadata_found", info_hash=h, files=got.file_count)
            elif got is None or got.kind == "closed":
                self._cut(h, started, fetched=got is not None)
            elif got.kind not in NOT_ITS_FAILURE:
                self.state.failed(h, time.time())
                self.failed += 1
                log.info("metadata_not_found", info_hash=h, kind=got.kind)
        except StoreError as e:
            log.warning("metadata_not_noted", info_hash=h, error=str(e))
        finally:
            self.running.pop(h, None)

    def _cut(self, h: str, started: float, fetched: bool) -> None:
        """The stop cut this fetch short (or came while it waited for its place): say so, and have the
        torrent visited again soon (``TorrentMetadata.cut``, within ``retry_seconds``)."""
        self.cut += 1
        retry = self.settings.retry_seconds
        became = self.state.cut(h, time.time(), retry)
        after = {"due": f"visited again within {retry:g} s", "ready": f"visited again within {retry:g} s",
                 "in_flight": "being visited"}.get(became, f"left to its own next visit ({became})")
        log.info("metadata_fetch_cut", info_hash=h, seconds=round(time.monotonic() - started, 1), torrent=became,
                 message=f"the worker stopped {'before the fetch ended' if fetched else 'before the fetch began'}"
                         f"; not a failure: {after}")

    def close(self) -> None:
        """Let running fetches finish (``SHUTDOWN_GRACE``), then close the fetcher: the rest end "closed" and
        are noted as cut."""
        gevent.joinall(list(self.running.values()), timeout=SHUTDOWN_GRACE)
        self.closing.set()
        self.fetcher.close()
        gevent.joinall(list(self.running.values()), timeout=SHUTDOWN_GRACE)
