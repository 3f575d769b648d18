"""The sources a visit may ask: the torrent's own trackers, bounded, and what its last visits noted.

``plan.lua`` hands a visit at most ``PEERCRAWL_MAX_TRACKERS_PER_TORRENT`` of
the torrent's trackers (a random draw of a larger set, so a set stored before
the bound is never announced whole) with the torrent's source notes (each
tracker's not-before time, the DHT's schedule: ``source_notes``) and from
when its metadata may be fetched (``torrent_metadata.fetch_from``, read
only where ``PEERCRAWL_METADATA`` is on), in one round trip. The visit
writes its notes back in its completion's step (``note_args``; ``note`` for
a visit that does not complete). Apart from the transitions
because a plan changes no torrent's state: it is the one read a visit needs,
and its one write is a per-torrent hash that expires on its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.source_notes import SourceNotes, decode, tracker_list
from crawler.queue.torrent_metadata import FETCH_FIELDS, fetch_from
from crawler.settings import Settings
from crawler.store import scripts
from crawler.store.store import Store

# Most torrents one plan.lua call reads (~3 us of Redis each), and most tracker URLs it may answer:
# at the largest per-torrent bound (10,000) a call reads one torrent.
PLAN_BATCH = 128
PLAN_TRACKERS = 8192


class Planned(NamedTuple):
    """What ``plan.lua`` read of one torrent: its own trackers (at most the per-torrent bound), its
    source notes, the unix time from which its metadata may be fetched (None: never, or the
    process fetches none), the notes' fields as stored, and the unix time they expire (0: none
    stored, or stored without an expiry)."""

    own: list[str]
    notes: SourceNotes
    fetch_from: float | None
    raw_notes: dict[str, str]
    notes_until: float


class VisitPlan:
    """The trackers of one namespace's torrents a visit may ask. Raises ``StoreError``."""

    def __init__(self, client: redis.Redis | Store, keys: Keys, settings: Settings):
        self.store = Store.of(client)  # a worker's: its script calls share round trips
        client = self.client = self.store.client
        self.keys = keys
        self.settings = settings
        self.script = scripts.register(client, "plan", __package__)
        self._note = scripts.register(client, "note", __package__)

    def plan(self, info_hash: str) -> Planned:
        """The torrent's own trackers (at most the per-torrent bound, a random draw of a larger
        set), its source notes and when its metadata may be fetched, in one round trip."""
        return self.plans([info_hash])[0]

    def with_trackers(self, hashes: Sequence[str], defaults: tuple[str, ...]) -> list[tuple[list[str], Planned]]:
        """``plans`` of ``hashes``, each with the tracker URLs a visit of it asks: ``defaults`` (the
        configured ones), then its own (``source_notes.tracker_list``)."""
        return [(tracker_list(defaults, planned.own), planned) for planned in self.plans(hashes)]

    def plans(self, hashes: Sequence[str]) -> list[Planned]:
        """``plan`` of each of ``hashes``, in one round trip: one plan.lua call a shard, of at most
        ``PLAN_BATCH`` torrents each and ``PLAN_TRACKERS`` trackers they may answer."""
        fields = FETCH_FIELDS if self.settings.metadata else ()
        cap = self.settings.max_trackers_per_torrent
        calls, order = [], []
        for k, part in self.keys.by_shard(hashes, max(1, min(PLAN_BATCH, PLAN_TRACKERS // max(1, cap)))):
            keys = [key for i in part for key in (k.trackers(hashes[i]), k.tracker_min_interval(hashes[i]),
                                                  k.torrent(hashes[i]))]
            calls.append((self.script, keys, [cap, *fields]))
            order.append(part)
        try:
            replies = self.store.run(calls) if calls else []
        except redis.RedisError as e:
            raise StoreError(f"reading the torrent's trackers failed: {e}") from e
        out: list = [None] * len(hashes)
        for part, reply in zip(order, replies):
            for i, one in zip(part, reply, strict=True):
                out[i] = self.read(one)
        return out

    def read(self, reply) -> Planned:
        """One torrent's part of a plan.lua reply as a ``Planned``."""
        own, flat, _, fields, ttl_ms = reply
        raw = {flat[i].decode(): flat[i + 1].decode() for i in range(0, len(flat), 2)}
        return Planned([u.decode() for u in own[: self.settings.max_trackers_per_torrent]], decode(raw),
                       fetch_from(fields) if fields else None, raw,
                       time.time() + ttl_ms / 1000 if ttl_ms > 0 else 0.0)

    def note(self, info_hash: str, fields: dict[str, str], drop: tuple[str, ...], ttl: float) -> None:
        """Set ``fields`` and drop ``drop`` of the torrent's source notes in one step; they expire
        ``ttl`` seconds after this write."""
        self.send(info_hash, self.note_args(fields, drop, ttl))

    def send(self, info_hash: str, args: list | None) -> None:
        """Write ``info_hash``'s notes (``note_args``; None: nothing to write) with note.lua, in a
        round trip of its own."""
        if args is None:
            return
        try:
            self.store.run([(self._note, [self.keys.for_torrent(info_hash).tracker_min_interval(info_hash)], args)])
        except redis.RedisError as e:
            raise StoreError(f"writing the torrent's source notes failed: {e}") from e

    @staticmethod
    def note_args(fields: dict[str, str], drop: tuple[str, ...], ttl: float) -> list | None:
        """``note``'s arguments as note.lua takes them (None: nothing to write): for ``send``, or for
        a visit's completion, which writes them in its own step (``Queue.complete``'s ``notes``)."""
        if not fields and not drop:
            return None
        args: list = [max(1, int(ttl)), len(fields)]
        for f, v in fields.items():
            args += [f, v]
        args += drop
        return args

    def hold_trackers(self, info_hash: str, not_before: dict[str, float], ttl: float) -> None:
        """Ask no tracker of ``not_before`` for ``info_hash`` before its time (what ``plan`` reads back)."""
        self.note(info_hash, {u: repr(t) for u, t in not_before.items()}, (), ttl)
