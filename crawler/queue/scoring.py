"""Scoring, once per visit (contract §2), as pure functions.

``outcome`` classifies a visit; ``multiplier`` is its outcome's factor.
``complete.lua`` applies the multiplication and the eviction threshold on the
Redis side (atomically with the state change, with staged eviction and
pins); these functions are what the worker calls to choose the multiplier.

Boundaries with the defaults: 0.5**7 = 0.0078 stays, 0.5**8 = 0.0039 is
evicted (the 8th visit in a row with no peers); 0.8**23 = 0.0059 stays,
0.8**24 = 0.0047 is evicted (the 24th "some peers" visit). Eviction "after
the ninth empty visit", as the rule is often put, counts one visit too
many: 0.5**8 is reached after eight.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from typing import NamedTuple

from crawler.settings import Settings


class Outcome(str, enum.Enum):
    """What a visit found, which sets the score's multiplier (contract §2)."""
    NONE = "none"  # no peers at all: x0.5
    SOME = "some"  # peers, but no full source with enough new ones: x0.8
    FULL = "full"  # some source full and enough new peers: x1.2


class SourceCount(NamedTuple):
    """What scoring needs of one source that answered."""

    returned: int
    max_peers: int

    @property
    def full(self) -> bool:
        """Whether the source gave as many peers as it may give at most (more could be waiting)."""
        return self.max_peers > 0 and self.returned >= self.max_peers


def outcome(found: int, new: int, sources: Iterable[SourceCount], new_fraction: float = 0.05) -> Outcome:
    """Classify a visit that some source answered.

    ``found``: distinct peer IPs from all answering sources; ``new``: those
    newly recorded for the torrent; ``sources``: the answering sources.
    A failed visit (no source answered) is not scored at all.
    """
    if found == 0:
        return Outcome.NONE
    for s in sources:
        if s.full and new >= math.ceil(new_fraction * s.max_peers):
            return Outcome.FULL
    return Outcome.SOME


def multiplier(o: Outcome, settings: Settings) -> float:
    """The score multiplier of outcome ``o`` under ``settings``."""
    return {
        Outcome.NONE: settings.multiplier_none,
        Outcome.SOME: settings.multiplier_some,
        Outcome.FULL: settings.multiplier_full,
    }[o]
