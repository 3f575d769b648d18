"""The place marks a process knows are fresh: a peer met again skips them.

Strategy: an IP's place marks (``countries.C``, its city's, its postcode's:
one per place metric, shared by every torrent) are checked by the script
that records them, which answers the oldest of their times. Until that time
is a window old, every one of them is fresh and unchanged: a mark is only
renewed once expired, and only expired marks are swept. So the process
keeps that time per (IP, place) and, until then, sends the IP's next
records without its place marks (a torrent part: record.lua's "T" with
several shards, its mixed form with one), passing the time on, so the
group record stays no younger than the IP's place marks. A peer in many
swarms then costs its place marks once per process per window. The
memory holds at most ``FRESH_PLACES`` pairs, then starts over.

What it trusts is Redis keeping what it acknowledged: a failover that
loses a recording's marks (and its counts) after the process learned
their time leaves those place counts lost instead of counted again
(docs/redis.md, "What a failover can lose").
"""

from __future__ import annotations

import struct
from collections.abc import Callable

# (IP, place) pairs a process remembers; ~100 B each: ~50 MB at most.
FRESH_PLACES = 500_000


class FreshPlaces:
    """The oldest place mark time of each (IP, place) met, keyed by ``key(fingerprint, place)``."""

    __slots__ = ("_times",)

    def __init__(self):
        self._times: dict[int, int] = {}

    @staticmethod
    def key(fingerprint: int, where: int) -> int:
        """The key of an IP (its 128-bit fingerprint) at a place (``Fingerprinter.where``): the same
        in every process, so a sum of them fingerprints a swarm (``swarm_record``)."""
        return fingerprint ^ where

    def since(self, key: int, cutoff: int) -> int:
        """The oldest time of the place marks of ``key`` when every one is fresh after ``cutoff``
        (now - window), else 0."""
        t = self._times.get(key, 0)
        return t if t > cutoff else 0

    def times(self) -> Callable[[int, int], int]:
        """The lookup ``since`` makes, for a loop over many IPs to call at C speed: ``get(key, 0)``
        is the time of ``key``'s place marks (0: not known), fresh only if after the cutoff."""
        return self._times.get

    def learn(self, key: int, t: int) -> None:
        """The place marks of ``key`` are all fresh since ``t`` (the recording script's answer)."""
        times = self._times
        if len(times) >= FRESH_PLACES:
            times.clear()
        times[key] = t

    def learn_many(self, keys: list[int], times: bytes) -> None:
        """``learn`` of each of ``keys``, its time the u32 (big-endian) at its place in ``times``
        (a recording's answer): one C loop."""
        n = len(keys)
        known = self._times
        if len(known) + n > FRESH_PLACES:
            known.clear()
        known.update(zip(keys, struct.unpack(f">{n}I", times)))

    def __len__(self) -> int:
        return len(self._times)
