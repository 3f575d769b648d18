"""Pacing the crawler's DHT queries per remote node.

Why: a libtorrent node counts the packets each source address sends it and
ignores that address for 5 minutes once it has sent ``10 x
dht_block_ratelimit`` (default 50) packets within 10 seconds. A crawler runs
many lookups at once and, on a small routing table, every lookup starts from
the same few nodes, so without pacing those nodes ban it within a second.

What we control: libtorrent sends a lookup's queries itself; we only decide
when a lookup starts. What we observe: ``dht_outgoing_get_peers_alert``
reports every query with its destination and info-hash. A ``get_peers``
traversal queries each node of its result list at most once (libtorrent
flags it "queried"), and on the public DHT (``dht_restrict_search_ips``)
keeps at most one node per /24 beyond the first hop, so one traversal sends
one address at most one query (exceptions: docs/dht.md).

The rule: per remote IP, ``sent`` counts the queries of the last ``window``
seconds; every running traversal that has not queried that IP yet may still
send it one. A new lookup starts only if, for every IP,

    sent(ip) + (running traversals that have not queried ip) + 1 <= budget

with ``budget = floor(rate x window)``. Then no ``window``-long interval
ever holds more than ``budget`` queries to one IP: the queries in an interval
were either already counted at its last admission, or come from traversals
that were running then (and were reserved), or from the one admitted. An IP
never queried has ``sent`` 0, so at most ``budget`` traversals run at a time
whatever the lookups-in-flight setting says.

Groups: alerts name the info-hash, not the traversal, so the traversals of
one info-hash form a ``Group``: ``size`` traversals, and per IP how many of
them have queried it (``assigned``). A query to an IP is attributed to its
group while ``assigned[ip] < size``; beyond that (a traversal that queried an
IP twice, or a late query) it counts on top. Almost always a group holds one
traversal (a crawler rarely looks a torrent up twice at once).

Bookkeeping, O(1) per query: queries are counted per IP in slots of
``window / 20`` seconds, a slot leaving the count once its newest possible
query is ``window`` old (queries stay counted up to one slot longer: the
safe side). ``load(ip)`` = queries in the window minus ``hits(ip)``, the
sum of ``assigned[ip]`` over the running groups, and the rule becomes
``max(load) + running + 1 <= budget``. Since ``max(load)`` is at most the
total of queries in the window, most checks end there; the exact maximum is
computed only when that total would refuse, and kept until something
changes.

When a traversal is over: libtorrent posts no completion alert for
``get_peers``. A lookup that stops waiting (enough peers, settled, deadline)
may leave its traversal running, so a group stays counted until none of its
lookups waits and it has been quiet (no query, no reply) for ``quiet``
seconds (default 2: libtorrent's 1 s short timeout, after which a traversal
waiting on dead nodes opens another branch, plus its timer's granularity).
Later replies from slow nodes may still trigger a few queries; they count
on top, and the default rate (4/s against libtorrent's 5) leaves room for
them and for the routing-table pings we cannot see.

Pure: time comes in as arguments; nothing here waits or touches libtorrent.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

# libtorrent's rpc short timeout (1 s) plus the granularity of its timer.
TRAVERSAL_QUIET = 2.0


class Group:
    """The traversals of one info-hash, as the pacer sees them.

    ``last_activity``: monotonic time of the latest query or reply for the
    hash, maintained by the caller. The rest is the pacer's: ``size``
    traversals counted, ``waiting`` of them still have a lookup waiting,
    ``assigned`` IP -> how many of them have queried it.
    """

    __slots__ = ("assigned", "draining", "last_activity", "size", "waiting")

    def __init__(self, now: float):
        self.last_activity = now
        self.size = 0
        self.waiting = 0
        self.assigned: dict[str, int] = {}
        self.draining = False


class NodePacer:
    """Decides when a lookup may start so no remote IP gets more than ``rate`` queries/s.

    ``rate`` (queries per second) and ``window`` (seconds) give the budget
    ``floor(rate x window)``: at most that many queries to one IP in any
    ``window``-long interval. ``quiet``: seconds without activity after which
    a group with no waiting lookup no longer counts; ``on_retire(group)`` is
    then called. Raises ``ValueError`` for a budget below 2.
    """

    def __init__(self, rate: float, window: float, quiet: float = TRAVERSAL_QUIET,
                 on_retire: Callable[[Group], None] | None = None):
        budget = rate * window
        if not budget >= 2 or math.isinf(budget):
            raise ValueError(f"DHT pacing: rate x window must be a finite number of at least 2, got {budget:g}")
        self.budget = int(budget)
        self.window = window
        self.quiet = quiet
        self.running = 0  # traversals counted, over all groups
        self._on_retire = on_retire
        self._slot = window / 20
        # (start, {ip: queries}) per slot, oldest first; the last one is
        # filled until _slot_end.
        self._slots: deque[tuple[float, dict[str, int]]] = deque()
        self._current: dict[str, int] = {}
        self._slot_end = -math.inf
        self._total = 0  # queries in the slots
        self._groups: set[Group] = set()  # groups with traversals counted
        self._max = 0  # max(load), valid while not _dirty
        self._dirty = False
        self._draining: deque[Group] = deque()

    # --- what the dispatcher reports ----------------------------------------

    def sent(self, ip: str, now: float, group: Group | None) -> None:
        """One query to ``ip`` at ``now`` for the hash of ``group`` (None: a
        hash with no counted traversal)."""
        if now >= self._slot_end:
            self._current = {}
            self._slots.append((now, self._current))
            self._slot_end = now + self._slot
        counts = self._current
        counts[ip] = counts.get(ip, 0) + 1
        self._total += 1
        self._dirty = True
        if group is not None:
            assigned = group.assigned
            n = assigned.get(ip, 0)
            if n < group.size:
                assigned[ip] = n + 1

    # --- what the lookups do -------------------------------------------------

    def ready(self, now: float) -> bool:
        """True if one more traversal may start now."""
        self._advance(now)
        if self._total + self.running < self.budget:
            return True  # no IP can have more load than all queries together
        if self._dirty:
            self._max = self._max_load()
            self._dirty = False
        return self._max + self.running < self.budget

    def start(self, group: Group) -> None:
        """Count one more traversal of ``group`` (right after ``ready`` said yes)."""
        group.size += 1
        group.waiting += 1
        self.running += 1
        self._groups.add(group)

    def end(self, group: Group) -> None:
        """One lookup of ``group`` stopped waiting; its traversal counts on
        until no lookup of the group waits and the group is quiet (checked
        by the next ``ready``)."""
        group.waiting -= 1
        if not group.waiting and not group.draining:
            group.draining = True
            self._draining.append(group)

    def next_change(self, now: float) -> float:
        """Seconds until ``ready`` may change with no other event (inf: never)."""
        t = math.inf
        if self._slots:
            t = self._slots[0][0] + self._slot + self.window
        if self._draining:
            t = min(t, self._draining[0].last_activity + self.quiet)
        return max(t - now, 0.0)

    def busiest(self, now: float) -> int:
        """Queries counted for the most-queried IP (the last ``window`` seconds, give or take a slot)."""
        self._advance(now)
        return max(self._counts().values(), default=0)

    # --- bookkeeping -----------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, slot in self._slots:
            for ip, n in slot.items():
                counts[ip] = counts.get(ip, 0) + n
        return counts

    def _max_load(self) -> int:
        load = self._counts()
        for group in self._groups:
            for ip, n in group.assigned.items():
                load[ip] = load.get(ip, 0) - n
        return max(0, max(load.values(), default=0))

    def _advance(self, now: float) -> None:
        slots, horizon = self._slots, now - self.window - self._slot
        while slots and slots[0][0] <= horizon:
            self._total -= sum(slots.popleft()[1].values())
            self._dirty = True
        # Oldest first; one still active holds back those behind it (they
        # stay counted a little longer: the safe side).
        draining, quiet_since = self._draining, now - self.quiet
        while draining:
            group = draining[0]
            if group.waiting:  # a new lookup of the hash started meanwhile
                group.draining = False
                draining.popleft()
            elif group.last_activity <= quiet_since:
                draining.popleft()
                self._retire(group)
            else:
                break

    def _retire(self, group: Group) -> None:
        group.draining = False
        self.running -= group.size
        group.size = 0
        group.assigned.clear()
        self._groups.discard(group)
        self._dirty = True
        if self._on_retire is not None:
            self._on_retire(group)
