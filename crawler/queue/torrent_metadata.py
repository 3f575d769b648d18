"""A torrent's metadata as its peers gave it (BEP 9): whether to ask, and what an answer leaves.

``crawler.sources.metadata.metadata_fetch`` asks a torrent's peers for its info
dictionary; this module owns what the queue keeps of it, in the torrent's
HASH beside its name:

- ``name`` (set only when the torrent has none: a name ``add`` kept is never
  replaced), ``size`` (total bytes) and ``files`` (file count), and
  ``md_done``, the time of the success: one success per torrent, ever;
- ``md_fails`` and ``md_next``: failures in a row and the time before which
  no fetch is tried again, a wait that doubles from ``FIRST_WAIT`` up to
  ``LONGEST_WAIT``;
- ``md_cuts``: fetches in a row that ended because their process stopped
  (a worker's shutdown or ``--until-idle``'s end closes the fetcher), which
  says nothing of the torrent: no failure is counted and no wait set, and
  while they are at most ``MAX_CUTS`` the torrent is due again within the
  retry delay of a failed visit (``PEERCRAWL_RETRY_SECONDS``, 5 minutes,
  rather than its revisit; ``DueNow``: score and lane kept, trackers' min
  intervals still kept), so a visit soon offers its peers again. Not at
  once: transmission refuses a new connection from an address for a
  torrent for up to ~40 s after one closed (its uTP ones the longest), so
  an immediate retry from the same worker fails against it. The cut's
  peers are not kept: a visit finds them again.

``due`` is the worker's question before a fetch (one read); ``FETCH_FIELDS``
and ``fetch_from`` let a visit's plan read the same fields beforehand, so
that a visit of a torrent that has its name (most, once a crawl has run)
neither offers its peers nor asks; ``found``,
``failed`` and ``cut`` are one atomic step each (``metadata_note.lua``),
which writes nothing for a torrent whose hash is gone; ``cut`` then brings
the torrent's due time forward (``due_now.lua``, a step of its own: a
process stopped between the two leaves the torrent to its own due time).
"""

from __future__ import annotations

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.due_now import DueNow
from crawler.store import scripts
from crawler.torrents.torrent_names import MAX_BYTES

# The first wait after a failed fetch, doubling with each failure in a row, at most a week.
FIRST_WAIT, LONGEST_WAIT = 3600.0, 7 * 86400.0
# The torrent hash's fields that say from when its metadata may be fetched (``fetch_from``).
FETCH_FIELDS = ("name", "md_done", "md_next")
# Fetches cut by a stop, in a row, after which the torrent is no longer brought forward but waits for its
# own next visit: a fetch that always outlasts its process's stop costs an early visit only this often.
MAX_CUTS = 3


def fetch_from(fields) -> float | None:
    """The unix time from which a fetch of a torrent may start, from its hash's ``FETCH_FIELDS`` (as
    HMGET answers them); None: never (it has a name, or a fetch succeeded)."""
    name, done, after = fields
    return None if name is not None or done is not None else float(after or 0)


class TorrentMetadata:
    """The metadata state of the torrents of one namespace (module note)."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.client, self.keys = client, keys
        self._script = scripts.register(client, "metadata_note", __package__)
        self._due_now = DueNow(client, keys)

    def due(self, info_hash: str, now: float) -> bool:
        """Whether a fetch of ``info_hash`` may start now: tracked, no name, no success yet, past its wait."""
        try:
            *fields, tracked = self.client.hmget(
                self.keys.for_torrent(info_hash).torrent(info_hash), *FETCH_FIELDS, "visits")
        except redis.RedisError as e:
            raise StoreError(f"reading {info_hash}'s metadata state failed: {e}") from e
        start = fetch_from(fields)
        return tracked is not None and start is not None and start <= now

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

    def cut(self, info_hash: str, now: float, retry: float) -> str:
        """A fetch its process's stop cut short: neither a success nor a failure; the torrent is due again
        ``retry`` seconds from ``now`` if it was due later. Returns what became of it: "due" (brought
        forward), "ready" (due by then already, or ready), "in_flight", "waits" (past ``MAX_CUTS`` cuts in
        a row: its own due time), "gone" (not tracked, or named meanwhile), or where ``DueNow`` found it
        ("quarantined", "evicted")."""
        cuts = self._call(info_hash, ["cut", repr(now)], int)
        if cuts == 0:
            return "gone"
        if cuts > MAX_CUTS:
            return "waits"
        return self._due_now.make_due(info_hash, now + retry)

    def _call(self, h: str, args: list, reply=bool):
        try:
            return reply(self._script(keys=[self.keys.for_torrent(h).torrent(h)], args=args))
        except redis.RedisError as e:
            raise StoreError(f"noting {h}'s metadata failed: {e}") from e
