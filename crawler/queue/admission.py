"""Admission: a stream of new torrents into the queue, in pipelined batches split by shard.

Each batch is one ``add.lua`` call (at most ``ADD_BATCH`` items) in each
shard holding some of its items, ``ADD_PIPELINE`` batches to a round trip:
the scripts slice any size, these keep one call's Redis time short. What
one call sends and answers is ``script_calls``'s; admitting is the
``add`` row of ``queue.TRANSITIONS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue import script_calls
from crawler.queue.lanes import offer, rank
from crawler.settings import Settings
from crawler.torrents.items import NewItem

# Items per add.lua call and calls per pipeline round trip.
ADD_BATCH = 1000
ADD_PIPELINE = 4


class Admission:
    """Admits items into the queue of ``keys`` (``Queue.add`` and ``Queue.add_stream``).

    ``store``: the queue's ``Store``; ``script``: ``add.lua`` registered;
    ``arrived(info_hash, at, now, score)``: told of each torrent that became
    claimable, so the shard estimates know at once.
    """

    def __init__(self, store, keys: Keys, settings: Settings, script, arrived: Callable):
        self.store, self.keys, self.settings, self._add, self._arrived = store, keys, settings, script, arrived

    def _add_args(self, k: Keys, items: Sequence[NewItem], readmit: bool, now: float, lane: str | None = None,
                  move: bool = True) -> tuple[list, list, list[int]]:
        """``script_calls.add_args`` in shard ``k``, trackers bounded by the settings."""
        return script_calls.add_args(k, items, readmit, now, self.settings.max_trackers_per_torrent, lane, move)

    def add(self, items: Sequence[NewItem], readmit: bool = False, now: float | None = None,
            on_dropped: Callable[[NewItem, int], None] | None = None, lane: str | None = None,
            move: bool = True) -> list[str]:
        """Admit ``items``, all at ``now``; one status per item (``ADD_STATUS``'s values).

        Any number of items, sent as ``add_stream`` sends them.
        ``on_dropped(item, n)``: called for each item of which ``n`` trackers
        were not stored (its torrent's set was at the per-torrent bound).
        ``lane`` (``crawler.queue.lanes``): the lane of new and re-admitted items
        and, with ``move``, of tracked ones too; None: new ones are normal,
        tracked ones keep theirs.
        """
        now = time.time() if now is None else now
        return [status for _, status in self.add_stream(items, readmit, on_dropped=on_dropped, now=now,
                                                        lane=lane, move=move)]

    def add_stream(self, items: Iterable[NewItem], readmit: bool = False, batch: int = ADD_BATCH,
                   pipeline: int = ADD_PIPELINE, on_dropped: Callable[[NewItem, int], None] | None = None,
                   now: float | None = None, lane: str | None = None,
                   move: bool = True) -> Iterator[tuple[NewItem, str]]:
        """Admit a long stream of items in pipelined batches, yielding (item, status).

        Each batch is one atomic script call of at most ``ADD_BATCH`` items;
        ``pipeline`` calls share a round trip. Duplicates inside one batch
        are reported as already_tracked. ``on_dropped`` as in ``add``;
        ``now``: the admission time (default: each round trip's own);
        ``lane`` and ``move`` as in ``add``.
        """
        if lane is not None:
            rank(lane)  # a lane's name, or ValueError
        batch = max(1, min(batch, ADD_BATCH))
        pipeline = max(1, pipeline)
        stream = iter(items)
        while True:
            batches: list[list[NewItem]] = []
            while len(batches) < pipeline and (part := list(islice(stream, batch))):
                batches.append(part)
            if not batches:
                return
            yield from self._flush(batches, readmit, on_dropped, now, lane, move)

    def _flush(self, batches: list[list[NewItem]], readmit: bool, on_dropped: Callable[[NewItem, int], None] | None,
               now: float | None, lane: str | None = None, move: bool = True) -> Iterator[tuple[NewItem, str]]:
        """Admit ``batches`` in one round trip: each batch's items split by shard, one add.lua call each."""
        now = time.time() if now is None else now
        calls, parts = [], []
        for n, b in enumerate(batches):
            for k, positions in self.keys.by_shard(item.info_hash for item in b):
                part = [b[i] for i in positions]
                keys, args, cut = self._add_args(k, part, readmit, now, lane, move)
                calls.append((self._add, keys, args))
                parts.append((n, positions, part, cut))
        try:
            results = self.store.run(calls)
        except redis.RedisError as e:
            raise StoreError(f"adding torrents failed: {e}") from e
        statuses = [[""] * len(b) for b in batches]
        for (n, positions, part, cut), reply in zip(parts, results):
            for i, st in zip(positions, script_calls.added(part, reply, cut, on_dropped)):
                statuses[n][i] = st
                if st in ("added", "readmitted"):  # due at once; a readmitted one's held score unknown here
                    self._arrived(batches[n][i].info_hash, now, now,
                                  None if readmit else offer(lane or "normal", 1.0))
        for b, sts in zip(batches, statuses):
            yield from zip(b, sts)
