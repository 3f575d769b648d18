"""Place counter totals of a crawl of several shards: exact sums kept by a crash-safe rollup (contract §4, §9).

Why: with several shards, a torrent's counters (``torrents.<h>.*``) live
whole in its shard, but the place counters (``countries.*``) are counted
where each IP's place marks are: the shard of its keyed fingerprint
(``keys.shard_of_fingerprint``). A place counter's value is then the sum of
its shards' parts, and a ranking of sums cannot be read exactly from each
shard's own top ``k`` (a city tenth in every shard may be first overall).
So the sums are kept, each place index whole in one shard
(``keys.total_shard``), and a ranking is one read.

How: places.lua adds each increment to its shard's rollup outbox in the same
atomic step as the shard's marks (one field per month index and member:
the lifetime total gets the same increments). ``Rollup.settle`` moves every
shard's outbox into flight under a batch number (``rollup_take.lua``),
reads it in bounded HSCAN pages (kept only if still in flight once read), cuts
it into chunks by the shard holding each index's total, adds each chunk to
that shard's totals at most once (``rollup_fold.lua`` keeps, per source
shard, the last chunk it added), then ends the batch (``rollup_done.lua``).
Nothing is leased: a reader that dies mid-batch leaves it in flight and the
next one adds the chunks not yet added; two readers adding one batch add
each chunk once. ``stats``, ``export`` and the dashboard settle before they
read, so they see every visit recorded before they started; the workers
settle each flush cycle (``Recorder.sweep``) to keep the outboxes short.

With one shard none of this exists: the shard's indexes are the totals.
"""

from __future__ import annotations

from collections import defaultdict

import redis

from crawler.counters.names import LIFETIME, hashed
from crawler.errors import StoreError
from crawler.keys import Keys, index_tail, shard_of, total_shard
from crawler.store.hash_pages import read_hashes
from crawler.store.scripts import register
from crawler.store.store import Store

# Increments one rollup_fold.lua call adds (~1 µs each: a call holds Redis ~1 ms).
FOLD_CHUNK = 1000
# A batch in flight younger than this is left to its reader by the workers'
# settle (a reader adds ~50,000 increments a second: seconds for any backlog).
BUSY_MS = 30_000
# Rounds of settle: a batch found in flight may hide an outbox written before
# the settle began; the second round takes that outbox (or finds it taken by
# another reader, and adds that batch), so two rounds see everything, unless
# another reader ends batches under this one's reads: then it goes round again.
SETTLE_ROUNDS = 4


def sharded(keys: Keys) -> bool:
    """Whether the crawl of ``keys`` keeps place totals (more than one shard)."""
    return keys.counter_shards > 1


def of_torrents(scope: tuple[str, ...]) -> bool:
    """Whether the index ``scope`` holds torrents' counters (``torrents.<h>.*``), which live
    whole in each torrent's shard, rather than place counters, which are summed in totals."""
    return scope[0] == "torrents" or hashed(scope)


def index_keys(keys: Keys, period: str, scope: tuple[str, ...]) -> list[str]:
    """The keys that together hold the index ``scope`` of ``period``, each name in one of them.

    One shard: its index. Several: for a torrent's own index, its shard's;
    for the ``torrents`` family (a torrent per member), every shard's index,
    each holding its torrents; for a place index, the shard holding its total.
    """
    if not sharded(keys):
        return [keys.index(period, scope)]
    if hashed(scope):
        return [keys.counter_shard(shard_of(scope[2], keys.counter_shards)).index(period, scope)]
    if of_torrents(scope):
        return [s.index(period, scope) for s in keys.all_counter_shards]
    return [keys.counter_shard(total_shard(scope, keys.counter_shards)).total(period, scope)]


def member_key(keys: Keys, period: str, scope: tuple[str, ...], member: str) -> str:
    """The one key holding ``member``'s count in the index ``scope`` of ``period``."""
    if sharded(keys) and of_torrents(scope) and not hashed(scope):
        return keys.counter_shard(shard_of(member, keys.counter_shards)).index(period, scope)
    (key,) = index_keys(keys, period, scope)
    return key


def outbox_field(month: str, scope: tuple[str, ...], member: str) -> bytes:
    """A rollup outbox field as places.lua writes it: u16 length, ``<YYYY-MM>:<scope>``, the member."""
    tail = index_tail(month, scope).encode("utf-8")
    return len(tail).to_bytes(2, "big") + tail + member.encode("utf-8")


class Rollup:
    """Adds every shard's rollup outbox to the totals (module note). ``keys``: the home ``Keys``."""

    def __init__(self, client: redis.Redis | Store, keys: Keys):
        self.store = Store.of(client)  # a worker's: its script calls share round trips
        client = self.client = self.store.client
        self.home = keys.home
        self.shards = keys.all_counter_shards
        self._take = register(client, "rollup_take", package=__package__)
        self._fold = register(client, "rollup_fold", package=__package__)
        self._done = register(client, "rollup_done", package=__package__)

    def settle(self, everything: bool = True) -> int:
        """Add every increment recorded before this call to the totals; returns the increments
        added (each to a month's total and the lifetime one).

        ``everything``: also add batches other readers are adding (``stats``
        needs them all). False (the workers' housekeeping): leave a batch
        taken less than ``BUSY_MS`` ago to its reader, so workers settling at
        once do not all redo one batch. Raises ``StoreError`` if Redis fails
        (what was added stays added; the rest is added by the next settle).
        """
        pending = list(range(len(self.shards)))
        fresh = 0 if everything else BUSY_MS
        added = 0
        try:
            for _ in range(SETTLE_ROUNDS):
                if not pending:
                    break
                taken, moved = self._take_all(pending, fresh)
                added += self._fold_all(taken)
                # a batch found in flight may hide an older outbox; a batch that
                # ended while read was added by another reader, who may now be
                # adding the next one: those shards go round again
                pending = [i for i, _, recovered, _ in taken if recovered] + moved
        except redis.RedisError as e:
            raise StoreError(f"adding the shards' counters to the totals failed: {e}") from e
        return added

    def _take_all(self, shards: list[int], fresh: int = 0) -> tuple[list[tuple[int, int, bool, dict]], list[int]]:
        """``(shard, batch, recovered, {field: count})`` of each of ``shards`` with a batch to add,
        and the shards whose batch ended while it was read (``_read``)."""
        calls = [(self._take, [s.rollup_outbox, s.rollup_in_flight, s.rollup_seq, s.rollup_taken], [fresh])
                 for s in (self.shards[i] for i in shards)]
        got = self.store.run(calls)
        ids = [(i, int(r[0]), bool(r[1])) for i, r in zip(shards, got) if r[0] > 0]
        kept = self._read(ids)
        have = {t[0] for t in kept}
        return kept, [i for i, _, _ in ids if i not in have]

    def _read(self, taken: list[tuple[int, int, bool]]) -> list[tuple[int, int, bool, dict]]:
        """The fields of each batch ``taken`` (HSCAN, every shard's pages pipelined), kept only
        if the batch is still the one in flight once read: then it was whole throughout
        (a batch ends before the next is taken, and taking one raises the number)."""
        fields = read_hashes(self.client, {i: self.shards[i].rollup_in_flight for i, _, _ in taken})
        pipe = self.client.pipeline(transaction=False)
        for i, _, _ in taken:
            pipe.get(self.shards[i].rollup_seq)
            pipe.exists(self.shards[i].rollup_in_flight)
        still = pipe.execute() if taken else []
        return [(i, batch, recovered, fields[i]) for k, (i, batch, recovered) in enumerate(taken)
                if still[2 * k + 1] and still[2 * k] is not None and int(still[2 * k]) == batch]

    def _fold_all(self, taken: list) -> int:
        """Add the batches ``taken`` to the totals chunk by chunk, then end them."""
        if not taken:
            return 0
        folds, added = self._fold_calls(taken)
        if folds:
            self.store.run(folds)
        self.store.run([(self._done, [self.shards[src].rollup_in_flight, self.shards[src].rollup_seq],
                                     [batch]) for src, batch, _, _ in taken])
        return added

    def _fold_calls(self, taken: list) -> tuple[list, int]:
        """The rollup_fold.lua calls of the batches ``taken`` and their increments."""
        n = len(self.shards)
        tails: dict = {}  # index tail -> (month, scope, the shard of its total)
        folds, added = [], 0
        for src, batch, _, fields in taken:
            by_target: dict[int, list] = defaultdict(list)
            for f, count in fields.items():
                end = 2 + ((f[0] << 8) | f[1])
                info = tails.get(f[2:end])
                if info is None:
                    info = tails[f[2:end]] = _tail(f[2:end], n)
                member, c = f[end:].decode("utf-8"), int(count)
                rows = by_target[info[2]]
                rows.append((info[0], info[1], member, c))  # the month's total
                rows.append((LIFETIME, info[1], member, c))  # and the lifetime one
                added += c
            for target in sorted(by_target):
                folds += self._folds(src, batch, target, sorted(by_target[target]))
        return folds, added

    def _folds(self, src: int, batch: int, target: int, rows: list) -> list:
        """The rollup_fold.lua calls adding ``rows`` (sorted: every reader cuts them alike) to ``target``."""
        shard = self.shards[target]
        calls = []
        for c, first in enumerate(range(0, len(rows), FOLD_CHUNK), 1):
            keys, kinds, args = [shard.rollup_applied], [], []
            numbers: dict[tuple, int] = {}  # (period, scope) -> its total's position in keys
            for period, scope, member, n in rows[first : first + FOLD_CHUNK]:
                k = numbers.get((period, scope))
                if k is None:
                    keys.append(shard.total(period, scope))
                    kinds.append("h" if hashed(scope) else "z")
                    k = numbers[(period, scope)] = len(keys) - 1
                args += [k, member, n]
            calls.append((self._fold, keys, [src, batch * 65536 + c, "".join(kinds), *args]))
        return calls


def _tail(tail: bytes, shards: int) -> tuple[str, tuple[str, ...], int]:
    """``(month, scope, shard of its total)`` of an index tail ``<YYYY-MM>:<scope>`` of the rollup outbox.

    A name holding ``:`` splits into more scope parts, which ``Keys.total``
    and ``total_shard`` join back into the same text.
    """
    period, *scope = tail.decode("utf-8").split(":")
    return period, tuple(scope), total_shard(tuple(scope), shards)
