"""Lanes: the queues a claim serves in order (contract §1; priority lanes with guaranteed shares for the lower ones).

Every torrent is in one lane: ``high``, ``normal`` (the default), ``low`` or
``discovered`` (fed by discovery). A claim takes the best-scored ready
torrent of the first lane that has one, except that every lane below it is
guaranteed ``PEERCRAWL_LANE_SHARE`` of the claims while it has ready
torrents (``claim.lua`` keeps what each lane is owed in ``{shard}:lanecredit``,
so the shares hold across calls and workers). A torrent keeps its lane for
life unless ``add --lane`` moves it (an evicted one keeps it until its
tombstone is forgotten).

A lane's due torrents count as ready ones, and claims move the due queue
(``cooling``, shared by every lane) into the ready sets oldest first, a few
per claim: a backlog of one lane there would hide the torrents of a higher
lane behind it. So a lane's member set is also its due index: a torrent's
score there is its due time while it cools (0 otherwise), and a claim that
finds more due than it moves also moves each marked lane's own oldest due
torrents (more than it takes, so a lane never runs out within a claim while
it has due ones). The normal lane has no member set, so a new torrent of
another lane skips the due queue and enters its lane's ready set at once: a
bulk add to the low or discovered lane never stands before normal torrents
there. What is left: normal torrents due after a backlog of low or
discovered revisits in the due queue (revisits that fell due while no
worker claimed, as through an outage) wait until claims have moved that
backlog into ready, 2n + 8 due torrents per claim of n.

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
