"""How a namespace's keys are laid out in shards (contract §9): the shards' hash tags and ``ShardLayout``.

The home, hash tag ``{<namespace>}``, holds what the whole crawl shares. A
crawl of ``n`` shards (``PEERCRAWL_QUEUE_SHARDS``) keeps its queue and its
counters in shards ``0..n-1``. With one shard, shard 0 is the home itself, so
a one-shard crawl is exactly the layout of a single Redis; with more, shard
``i``'s tag is ``{<namespace>/<i>.<k>}``, ``k`` chosen so the tags spread
evenly over the cluster's slot space (``shard_tag``).

``ShardLayout`` is the part of ``crawler.keys.Keys`` that says which shard
an object stands for and leads from the home to its shards and back; it
names no key (``Keys`` names them all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Self

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

# Most shards a namespace may have (PEERCRAWL_QUEUE_SHARDS): each shard costs
# every status read and every shard-wide housekeeping pass a command.
MAX_SHARDS = 1024
# Dedupe mark buckets over all of a crawl's shards (PEERCRAWL_MARK_BUCKETS;
# crawler/counters/marks.py): the count of a crawl that records none (every crawl
# made before the count was a setting), and the bounds of one that does. Each
# shard takes an equal part, at least one bucket.
DEFAULT_MARK_BUCKETS = 1 << 18
MIN_MARK_BUCKETS, MAX_MARK_BUCKETS = MAX_SHARDS, 1 << 30


@cache
def shard_tag(namespace: str, i: int, shards: int) -> str:
    """The hash tag's text of shard ``i`` of ``shards`` (more than one).

    ``<namespace>/<i>.<k>`` with the smallest ``k`` whose slot falls in the
    ``i``-th of ``shards`` equal parts of the 16,384 slots. ``redis-cli
    --cluster create`` gives each master one contiguous, equal range of
    slots, so with a shard count that is a multiple of the masters every
    master holds the same number of shards. (``/`` is not allowed in a
    namespace, so no namespace's tags meet another's.)
    """
    low = i * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (i + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    k = 0
    while not low <= key_slot(f"{namespace}/{i}.{k}".encode()) < high:
        k += 1
    return f"{namespace}/{i}.{k}"


@dataclass(frozen=True)
class ShardLayout:
    """A namespace (``PEERCRAWL_NAMESPACE``), its shard counts and which shard this is.

    An empty ``tag`` is the home (and the one shard of a one-shard crawl);
    ``shard(i)`` and ``counter_shard(j)`` give an object of the same class
    for one shard, ``home`` the way back.
    """

    namespace: str
    shards: int = 1
    tag: str = field(default="", compare=True)
    # Counter shards; 0: as many as queue shards (the layout of a new crawl).
    # They differ only after ``peercrawl reshard`` (crawler/queue/resharding.py), which
    # moves torrents but cannot move dedupe marks.
    counters: int = 0
    # Dedupe mark buckets over all counter shards; 0: DEFAULT_MARK_BUCKETS. Known to the home (as
    # ``counters`` is), which the recorder is built from.
    marks: int = 0
    # The crawl has kept its torrents' marks in their rosters from its start (crawler/counters/marks.py);
    # False: some of the window may be by (IP, torrent), where crawls made before rosters kept them.
    rosters: bool = False

    def __post_init__(self):
        for n in (self.shards, self.counters or self.shards):
            if not 1 <= n <= MAX_SHARDS:
                raise ValueError(f"a namespace has 1 to {MAX_SHARDS} shards, not {n}")
        if self.marks and (type(self.marks) is not int or not MIN_MARK_BUCKETS <= self.marks <= MAX_MARK_BUCKETS):
            raise ValueError(f"a namespace has {MIN_MARK_BUCKETS} to {MAX_MARK_BUCKETS} mark buckets, not {self.marks}")

    @property
    def mark_buckets(self) -> int:
        """How many dedupe mark buckets the crawl's counter shards share."""
        return self.marks or DEFAULT_MARK_BUCKETS

    @property
    def shard_mark_buckets(self) -> int:
        """How many of them each counter shard holds (``buckets_per_shard``)."""
        return buckets_per_shard(self.mark_buckets, self.counter_shards)

    def shard(self, i: int) -> Self:
        """The keys of shard ``i`` (``0 <= i < shards``)."""
        if not 0 <= i < self.shards:
            raise ValueError(f"shard {i} of a namespace with {self.shards} shards")
        return _all_shards(type(self), self.namespace, self.shards)[i]  # type: ignore[arg-type]  # see _all_shards

    @property
    def all_shards(self) -> tuple[Self, ...]:
        """Every shard's keys, shard 0 first."""
        return _all_shards(type(self), self.namespace, self.shards)  # type: ignore[arg-type]  # see _all_shards

    @property
    def counter_shards(self) -> int:
        """How many shards the counters, dedupe marks and StatHat outbox are split into."""
        return self.counters or self.shards

    def counter_shard(self, j: int) -> Self:
        """The keys of counter shard ``j`` (``0 <= j < counter_shards``): queue shard ``j``'s tag
        when the counts agree."""
        n = self.counter_shards
        if not 0 <= j < n:
            raise ValueError(f"counter shard {j} of a namespace with {n} counter shards")
        return _all_shards(type(self), self.namespace, n)[j]  # type: ignore[arg-type]  # see _all_shards

    @property
    def all_counter_shards(self) -> tuple[Self, ...]:
        """Every counter shard's keys, shard 0 first."""
        return _all_shards(type(self), self.namespace, self.counter_shards)  # type: ignore[arg-type]  # see _all_shards

    @property
    def home(self) -> Self:
        """The namespace's home: what every shard of the crawl shares."""
        return type(self)(self.namespace, self.shards, counters=self.counters, marks=self.marks, rosters=self.rosters)


# Its callers ignore mypy's arg-type error: mypy does not take a class for Hashable, as
# the cache's key must be (every class is).
@cache
def _all_shards(cls: type[ShardLayout], namespace: str, shards: int) -> tuple:
    if shards == 1:
        return (cls(namespace),)
    return tuple(cls(namespace, shards, shard_tag(namespace, i, shards)) for i in range(shards))


def buckets_per_shard(total: int, shards: int) -> int:
    """Each of ``shards`` counter shards' part of ``total`` mark buckets (at least one): the number a
    shard's mark fingerprints are taken modulo."""
    return max(1, total // shards)
