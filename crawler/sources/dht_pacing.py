"""Pacing the crawler's DHT queries per remote node.

Why: a libtorrent node counts the packets each source address sends it and
ignores that address for 5 minutes once it has sent ``10 x
dht_block_ratelimit`` (default 50) packets within 10 seconds. A crawler runs
many lookups at once and, on a small routing table, every lookup starts from
the same few nodes, so without pacing those nodes ban it within a second.

What we control: libtorrent sends a lookup's queries itself; we only decide
when a lookup starts. What we observe: ``dht_outgoing_get_peers_alert``
reports every query with its destination. A ``get_peers`` traversal queries
each node of its result list at most once (libtorrent flags it "queried"),
and on the public DHT (``dht_restrict_search_ips``) keeps at most one node
per /24 beyond the first hop, so one traversal sends one address at most one
query, with rare exceptions (see docs/dht.md).

The rule: per remote IP, ``sent`` counts the queries of the last ``window``
seconds; every running traversal that has not queried that IP yet may still
send it one. A new lookup starts only if, for every IP,

    sent(ip) + (running traversals that have not queried ip) + 1 <= budget

with ``budget = floor(rate x window)``. Then no ``window``-long interval
ever holds more than ``budget`` queries to one IP: the queries in an interval
were either already counted at its last admission, or come from traversals
that were running then (and were reserved), or from the one admitted. An IP
never queried has ``sent`` 0, so at most ``budget - 1`` traversals run at a
time whatever the lookups-in-flight setting says.

Bookkeeping, all O(1) per query: ``load(ip) = sent(ip) - hits(ip)``, where
``hits(ip)`` counts running traversals that queried ip. A query attributed to
a running traversal that had not queried that IP changes neither (both +1);
an unattributed query (none left to attribute it to) adds 1; an expired query
subtracts 1; a retiring traversal adds 1 for every IP it queried. The rule
becomes ``max(load) + running + 1 <= budget``; ``max(load)`` is kept as an
upper bound and recomputed exactly only when the bound would refuse.

When a traversal is over: libtorrent posts no completion alert for
``get_peers``. A lookup that stops waiting (enough peers, settled, deadline)
may leave its traversal running, so it stays counted until it has sent
nothing for ``quiet`` seconds (default 2: libtorrent's 1 s short timeout,
after which a traversal waiting on dead nodes opens another branch, plus its
timer's granularity). Later replies from slow nodes may still trigger a few
queries; the default rate (4/s against libtorrent's 5) leaves room for those
and for the routing-table pings we cannot see.

Pure: time comes in as arguments; nothing here waits or touches libtorrent.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

# libtorrent's rpc short timeout (1 s) plus the granularity of its timer.
TRAVERSAL_QUIET = 2.0


class Activity:
    """When a traversal, or a group of them, last sent a query or got a reply.

    ``last_activity`` is a monotonic time maintained by the caller. The DHT
    source shares one per info-hash: alerts name the info-hash, not the
    traversal, so lookups of one hash are quiet only together.
    """

    __slots__ = ("last_activity",)

    def __init__(self, now: float):
        self.last_activity = now


class Traversal:
    """One libtorrent ``get_peers`` traversal, as the pacer sees it.

    ``queried``: remote IPs whose queries were attributed to it;
    ``activity``: its ``Activity`` (its own if none is given);
    ``ended``/``retired``: set by the pacer.
    """

    __slots__ = ("activity", "ended", "queried", "retired")

    def __init__(self, now: float, activity: Activity | None = None):
        self.queried: set[str] = set()
        self.activity = Activity(now) if activity is None else activity
        self.ended = False
        self.retired = False


class NodePacer:
    """Decides when a lookup may start so no remote IP gets more than ``rate`` queries/s.

    ``rate`` (queries per second) and ``window`` (seconds) give the budget
    ``floor(rate x window)``: at most that many queries to one IP in any
    ``window``-long interval. ``quiet``: seconds without activity after which
    an ended traversal no longer counts. ``on_retire(traversal)`` is called
    when one stops counting. Raises ``ValueError`` for a budget below 2.
    """

    def __init__(self, rate: float, window: float, quiet: float = TRAVERSAL_QUIET,
                 on_retire: Callable[[Traversal], None] | None = None):
        budget = rate * window
        if not budget >= 2 or math.isinf(budget):
            raise ValueError(f"DHT pacing: rate x window must be a finite number of at least 2, got {budget:g}")
        self.budget = int(budget)
        self.window = window
        self.quiet = quiet
        self.running = 0
        self._on_retire = on_retire
        self._sent: deque[tuple[float, str]] = deque()
        self._load: dict[str, int] = {}
        self._max = 0  # an upper bound of max(load), exact after _exact_max()
        self._draining: deque[Traversal] = deque()

    # --- what the dispatcher reports ----------------------------------------

    def sent(self, ip: str, now: float, owner: Traversal | None) -> None:
        """One query to ``ip`` at ``now``, by ``owner`` (a running traversal
        that had not queried ``ip`` yet), or ``None`` if no such traversal."""
        self._sent.append((now, ip))
        if owner is not None:
            owner.queried.add(ip)
        else:
            self._bump(ip, 1)

    # --- what the lookups do -------------------------------------------------

    def ready(self, now: float) -> bool:
        """True if one more traversal may start now."""
        self._advance(now)
        if self._max + self.running < self.budget:
            return True
        self._exact_max()
        return self._max + self.running < self.budget

    def start(self, traversal: Traversal) -> None:
        """Count ``traversal`` as running (call right after ``ready`` said yes)."""
        self.running += 1

    def end(self, traversal: Traversal, now: float) -> None:
        """The lookup stopped waiting; ``traversal`` counts until it is quiet."""
        traversal.ended = True
        self._draining.append(traversal)
        self._advance(now)

    def next_change(self, now: float) -> float:
        """Seconds until ``ready`` may change with no other event (inf: never)."""
        t = math.inf
        if self._sent:
            t = self._sent[0][0] + self.window
        if self._draining:
            t = min(t, self._draining[0].activity.last_activity + self.quiet)
        return max(t - now, 0.0)

    def busiest(self, now: float) -> int:
        """Queries sent to the most-queried IP in the last ``window`` seconds."""
        self._advance(now)
        counts: dict[str, int] = {}
        for _, ip in self._sent:
            counts[ip] = counts.get(ip, 0) + 1
        return max(counts.values(), default=0)

    # --- bookkeeping -----------------------------------------------------------

    def _bump(self, ip: str, delta: int) -> None:
        load = self._load
        v = load.get(ip, 0) + delta
        if v:
            load[ip] = v
            self._max = max(self._max, v)
        else:
            del load[ip]

    def _exact_max(self) -> None:
        self._max = max(0, max(self._load.values(), default=0))

    def _advance(self, now: float) -> None:
        sent, horizon = self._sent, now - self.window
        while sent and sent[0][0] <= horizon:
            self._bump(sent.popleft()[1], -1)
        # Oldest ended first; one whose traversal is still active holds back
        # those behind it (they stay counted a little longer: safe side).
        draining, quiet_since = self._draining, now - self.quiet
        while draining and draining[0].activity.last_activity <= quiet_since:
            self._retire(draining.popleft())

    def _retire(self, trav: Traversal) -> None:
        trav.retired = True
        self.running -= 1
        for ip in trav.queried:
            self._bump(ip, 1)
        if self._on_retire is not None:
            self._on_retire(trav)
