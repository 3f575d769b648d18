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
   the wait. A fetch that ended because the process is stopping, or found
   this torrent's fetch already running, changes nothing.

At shutdown, running fetches get ``SHUTDOWN_GRACE`` seconds to finish
before the fetcher is closed (they then end "closed").
"""

from __future__ import annotations

import time

import gevent

from crawler import logs
from crawler.errors import StoreError
from crawler.queue.torrent_metadata import TorrentMetadata
from crawler.sources.metadata_info import TorrentInfo

log = logs.get("worker.metadata")

# Outcomes that say nothing about the torrent: not counted as its failures.
NOT_ITS_FAILURE = frozenset({"closed", "busy", "no_slot"})
SHUTDOWN_GRACE = 5.0


class MetadataNames:
    """The process's fetches of torrents' metadata (module note)."""

    def __init__(self, settings, fetcher, state: TorrentMetadata, budget):
        self.settings, self.fetcher, self.state, self.budget = settings, fetcher, state, budget
        self.running: dict[str, gevent.Greenlet] = {}
        self.found = self.failed = 0

    def offer(self, info_hash: str, peers) -> None:
        """A visit of ``info_hash`` found ``peers`` ((ip, port) pairs): fetch its metadata if it is due."""
        if info_hash in self.running or len(self.running) >= self.settings.metadata_in_flight:
            return
        self.running[info_hash] = gevent.spawn(self._fetch, info_hash, list(peers))

    def _fetch(self, h: str, peers: list) -> None:
        try:
            if not self.state.due(h, time.time()):
                return
            gevent.sleep(self.budget.take(["metadata"])["metadata"])
            got = self.fetcher.fetch(h, peers)
            if isinstance(got, TorrentInfo):
                self.state.found(h, got.name, got.total_size, got.file_count, time.time())
                self.found += 1
                log.info("metadata_found", info_hash=h, files=got.file_count)
            elif got.kind not in NOT_ITS_FAILURE:
                self.state.failed(h, time.time())
                self.failed += 1
                log.info("metadata_not_found", info_hash=h, kind=got.kind)
        except StoreError as e:
            log.warning("metadata_not_noted", info_hash=h, error=str(e))
        finally:
            self.running.pop(h, None)

    def close(self) -> None:
        """Let running fetches finish (``SHUTDOWN_GRACE``), then close the fetcher (the rest end "closed")."""
        gevent.joinall(list(self.running.values()), timeout=SHUTDOWN_GRACE)
        self.fetcher.close()
        gevent.joinall(list(self.running.values()), timeout=SHUTDOWN_GRACE)
