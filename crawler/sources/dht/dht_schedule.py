"""When a torrent's next DHT lookup is due: each visit while the DHT finds peers, ever less often while it finds none.

A lookup is a ``get_peers`` traversal: dozens of queries to other people's
nodes. Most torrents of a real catalogue have nobody on the DHT, so asking
for each of them on every visit spends the DHT's goodwill on nothing. The
schedule, per torrent:

- a lookup that found peers: the next visit looks up again (a DHT-only swarm
  with peers is looked up every visit), and the count of empty lookups
  starts again from 0;
- a lookup that found nobody: one more in a row. Below ``empty_visits`` (K,
  ``PEERCRAWL_DHT_EMPTY_VISITS``) in a row, the next visit looks up again;
  from the K-th on, the next lookup waits ``revisit × 2^(n − K + 1)``
  seconds after this one (n: the empty lookups in a row), so with visits a
  revisit interval apart it skips 1, then 3, 7, 15 ... visits, up to
  ``MAX_WAIT`` (a swarm that appears on the DHT is found within a day);
- a lookup that failed (no bootstrap yet, paced, a closed session) says
  nothing of the swarm: the count is left as it was.

A visit that skips the DHT scores on the sources it asked (contract §2), as
a visit scores on the trackers that answered; ``torrent --json`` shows the
skip and when the next lookup is due. ``empty_visits`` 0 looks up every visit.
"""

from __future__ import annotations

MAX_WAIT = 86_400.0
# 2^30 revisit intervals is past any MAX_WAIT; the exponent stops there.
MAX_DOUBLINGS = 30


def after_lookup(found: bool, empty_before: int, now: float, revisit: float, empty_visits: int,
                 ) -> tuple[int, float]:
    """(empty lookups in a row, unix time before which the next lookup waits; 0: the next visit) after a
    lookup that answered, ``found`` saying whether it found peers."""
    if found:
        return 0, 0.0
    n = empty_before + 1
    if empty_visits == 0 or n < empty_visits:
        return n, 0.0
    return n, now + min(revisit * 2 ** min(n - empty_visits + 1, MAX_DOUBLINGS), max(MAX_WAIT, revisit))
