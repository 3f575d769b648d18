"""A torrent's metadata as its peers gave it (BEP 9): whether to ask, and what an answer leaves.

``crawler.sources.metadata_fetch`` asks a torrent's peers for its info
dictionary; this module owns what the queue keeps of it, in the torrent's
HASH beside its name:

- ``name`` (set only when the torrent has none: a name ``add`` kept is never
  replaced), ``size`` (total bytes) and ``files`` (file count), and
  ``md_done``, the time of the success: one success per torrent, ever;
- ``md_fails`` and ``md_next``: failures in a row and the time before which
  no fetch is tried again, a wait that doubles from ``FIRST_WAIT`` up to
  ``LONGEST_WAIT``.

``due`` is the worker's question before a fetch (one read); ``found`` and
``failed`` are one atomic step each (``metadata_note.lua``), which writes
nothing for a torrent whose hash is gone.
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.torrent_names import MAX_BYTES
from crawler.store import scripts

# The first wait after a failed fetch, doubling with each failure in a row, at most a week.
FIRST_WAIT, LONGEST_WAIT = 3600.0, 7 * 86400.0


class TorrentMetadata:
    """The metadata state of the torrents of one namespace (module note)."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client, self.keys = client, keys
        self._script = scripts.register(client, "metadata_note", __package__)

    def due(self, info_hash: str, now: float) -> bool:
        """Whether a fetch of ``info_hash`` may start now: tracked, no name, no success yet, past its wait."""
        try:
            name, done, after, tracked = self.client.hmget(
                self.keys.for_torrent(info_hash).torrent(info_hash), "name", "md_done", "md_next", "visits")
        except redis.RedisError as e:
            raise StoreError(f"reading {info_hash}'s metadata state failed: {e}") from e
        return tracked is not None and name is None and done is None and float(after or 0) <= now

    def found(self, info_hash: str, name: str | None, total_size: int | None, file_count: int, now: float) -> bool:
        """Keep what a fetch learned; False when the torrent is gone (nothing written)."""
        name = (name or "")[: MAX_BYTES]
        while len(name.encode("utf-8")) > MAX_BYTES:  # cleaned names fit; this only guards the bound
            name = name[:-1]
        return self._call(info_hash, ["found", repr(now), name, "" if total_size is None else total_size,
                                      file_count])

    def failed(self, info_hash: str, now: float) -> bool:
        """A fetch that brought nothing: the next waits longer. False when the torrent is gone."""
        return self._call(info_hash, ["failed", repr(now), repr(FIRST_WAIT), repr(LONGEST_WAIT)])

    def _call(self, h: str, args: list) -> bool:
        try:
            return bool(self._script(keys=[self.keys.for_torrent(h).torrent(h)], args=args))
        except redis.RedisError as e:
            raise StoreError(f"noting {h}'s metadata failed: {e}") from e
