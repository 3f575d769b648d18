"""Lanes: the queues a claim serves in order (SPEC §1, seeds 002 and 004).

Every torrent is in one lane: ``high``, ``normal`` (the default), ``low`` or
``discovered`` (fed by discovery). A claim takes the best-scored ready
torrent of the first lane that has one, except that every lane below it is
guaranteed ``PEERCRAWL_LANE_SHARE`` of the claims while it has ready
torrents (``claim.lua`` keeps what each lane is owed in ``{shard}:lanecredit``,
so the shares hold across calls and workers). A torrent keeps its lane for
life unless ``add --lane`` moves it (an evicted one keeps it until its
tombstone is forgotten).

Sharded: each shard offers its first non-empty lane's best (``offer``), so
a claim goes to a shard with a higher lane first, and a shard's claim
stops where the lane it began in runs out, so the claim goes on in the
shard offering the next best. A claim may then come back short when every
shard's first lane ran out within it (each shard is asked once per claim);
the next claim goes on.

Layout: each lane has its own ready set (``Keys.ready_in``; the normal
lane's is the crawl's ``ready``, so a crawl from before lanes is all normal)
and each lane but normal a member set (``Keys.lane_members``). The other
states are shared; ``status`` counts them per lane by intersecting them with
the member sets (the normal lane is the rest).
"""

from __future__ import annotations

LANES = ("high", "normal", "low", "discovered")
DEFAULT = "normal"
# What `add --lane` accepts: discovered is discovery's (a torrent can be moved out of it).
USER_LANES = ("high", "normal", "low")
# The lanes that keep a member set (a torrent in none of them is normal).
MARKED = ("high", "low", "discovered")


def rank(lane: str) -> int:
    """1 for high to 4 for discovered; raises ValueError for a name that is not a lane."""
    return LANES.index(lane) + 1


def offer(lane: str, score: float) -> float:
    """What a shard offers when ``lane`` is its first non-empty lane and its best score is ``score``:
    ``(4 - rank) + score / (1 + score)``, so a higher lane always offers more (``claim.lua``)."""
    return (len(LANES) - rank(lane)) + score / (1.0 + score)
