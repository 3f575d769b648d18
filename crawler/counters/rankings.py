"""Reading the counters: the rankings behind ``peercrawl stats`` (contract §7).

Each query reads one index of ``names``: a sorted set (ZREVRANGE or ZSCORE),
or for ``--torrent`` the torrent's hash (HGETALL, sorted here; its size is
bounded by the torrent's peers). ``stats cities|postcodes`` without
``--torrent`` or ``--country`` merges the per-country indexes (one pipelined
ZREVRANGE per country the lifetime ``countries`` index knows, a few hundred
at most). Nothing scans the keyspace, so it stays fast with millions of
counters.

With several counter shards (contract §9) a torrent's counters live whole in
its shard, so a ranking of torrents merges each shard's first N, which is
exact because the shards hold disjoint torrents; a place counter is a sum of
shards' parts, read from its total (``rollup``, settled first), each place
index whole in one shard.

Order: largest count first; equal counts by name (the index member's bytes:
the torrent's hash, the place name; across countries the country's name
first). The cut at ``limit`` honours that order exactly: when the last
count kept has more holders than fit, the first ones by name are taken
(ZRANGE BYSCORE orders equal scores by member), not whichever ZREVRANGE
happens to return.

``unplaced`` is the row beside a ranking of places: the peers its scope's
own count holds that none of its places does (GeoIP could not place them,
or not in a city or postcode). An IP counts for ``torrents.<h>.users`` and
for each part of its place GeoIP knows, each part's mark written and renewed
with the others in one atomic step, so the scope's count less the sum of
its places' is exactly those peers while the database is the same; over
every country, where no count of all distinct IPs exists, the IPs no
country holds are counted under ``names.UNPLACED_MEMBER``, which every
ranking leaves out of its places (docs/metrics.md, "Unplaced peers").
``resolve_country`` is what a person typed for a country (``germany``,
``DE``) as the counters name it.
"""

from __future__ import annotations

from typing import cast

import redis

from crawler.counters import country_names, torrent_index
from crawler.counters.names import (
    FAMILIES,
    LIFETIME,
    UNPLACED_MEMBER,
    Metric,
    Query,
    check_month,
    hashed,
    info_hash_hex,
    is_place,
    metric_of,
    query_for,
    unescape,
)
from crawler.counters.rollup import Rollup, index_keys, member_key, of_torrents, sharded
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.store.scripts import register, run_pipelined


def top(
    client: redis.Redis,
    keys: Keys,
    family: str,
    *,
    torrent: str | None = None,
    country: str | None = None,
    month: str | None = None,
    limit: int = 20,
    settled: bool = False,
) -> list[dict]:
    """The largest counters of ``family`` as ``[{"metric", "count"}]``, largest first.

    ``torrent`` (40-hex) and ``country`` (an English name) narrow the scope;
    for ``countries`` with ``--country`` (or ``torrents`` with ``--torrent``)
    the answer is that one counter, if it exists. ``month`` (``YYYY-MM``)
    reads the month counters, whose metric names end in ``.<YYYY-MM>``.
    Equal counts are ordered by name. ``keys``: the home ``Keys``; with
    several shards the totals are settled first (``rollup``), then read;
    ``settled``: the caller just settled them (a page of many rankings).
    Raises ``ValueError`` on bad arguments, ``StoreError`` if Redis fails.
    The member of the unplaced (``names.UNPLACED_MEMBER``) is no place: it is
    left out (the first ``limit + 1`` are read, so the cut stays exact).
    """
    if limit < 1:
        raise ValueError("--limit must be at least 1")
    cut, limit = limit, limit + 1
    q = query_for(family, torrent, country)
    period = LIFETIME if month is None else check_month(month)
    suffix = "" if month is None else "." + month
    if sharded(keys) and not settled:
        Rollup(client, keys).settle()
    try:
        if q.across_countries:
            rows = _top_across_countries(client, keys, q, period, limit)
        elif q.member is not None:
            n = _count_in(client, keys, period, q.scope, q.member)
            rows = [] if n is None else [(q.member, n)]
        elif hashed(q.scope):
            # One torrent's places (bounded by its peers, one key), sorted here;
            # one country's of them filtered server-side.
            got = torrent_index.members(client, keys, period, q.scope, q.prefix or "")
            rows = sorted(got.items(), key=_order)[:limit]
        elif sharded(keys):
            rows = _top_totals(client, [("", k) for k in index_keys(keys, period, q.scope)], limit)
        else:
            rows = _top_merged(client, [("", keys.index(period, q.scope))], limit)
    except redis.RedisError as e:
        raise StoreError(f"reading counters failed: {e}") from e
    rows = [(m, c) for m, c in rows if is_place(m)][:cut]
    return [{"metric": metric_of(q, m) + suffix, "count": int(c)} for m, c in rows]


def resolve_country(client: redis.Redis, keys: Keys, given: str) -> str:
    """The country the counters name for ``given`` (``germany``, ``DE``: ``Germany``), else ``given`` as typed.

    Matching is ``country_names.match`` against the countries of the
    lifetime ``countries`` index (one ZRANGE of a few hundred members).
    Raises ``ValueError`` if ``given`` is blank, ``StoreError`` if Redis fails.
    """
    name = given.strip()
    if not name:
        raise ValueError("--country must not be empty")
    try:
        (ckey,) = index_keys(keys, LIFETIME, ("countries",))
        members = cast(list[tuple[bytes, float]], client.zrange(ckey, 0, -1, withscores=True))  # bytes: not decoded
        known = {unescape(m.decode()): s for m, s in members if is_place(m)}
    except redis.RedisError as e:
        raise StoreError(f"reading the countries failed: {e}") from e
    return country_names.match(name, known) or name


def unplaced(
    client: redis.Redis,
    keys: Keys,
    family: str,
    *,
    torrent: str | None = None,
    country: str | None = None,
    month: str | None = None,
    settled: bool = False,
) -> int | None:
    """The peers of ``top``'s scope that none of its places holds; None where no count says.

    ``countries --torrent H``: H's peers without a country; ``cities`` (or
    ``postcodes``) ``--torrent H``: H's peers without a city (no country, or
    a country GeoIP knows no city in), with ``--country C`` H's peers in C
    without one; ``cities --country C``: C's peers without a city;
    ``countries``: the count of ``names.UNPLACED_MEMBER``; ``cities`` (or
    ``postcodes``) over every country: every country's count, that one's
    included, less every country's cities. A single counter or the torrents
    are not places: None. Costs one more read of the torrent's index
    (bounded by its peers), or a sum inside Redis of the indexes summed
    (``index_sum.lua``, in slices). Raises as ``top``.
    """
    if family not in FAMILIES or family == "torrents":
        return None
    h = info_hash_hex(torrent) if torrent is not None else None
    q = query_for(family, h, country)
    if q.member is not None:
        return None
    period = LIFETIME if month is None else check_month(month)
    if sharded(keys) and not settled:
        Rollup(client, keys).settle()
    if q.scope == ("countries",) or q.across_countries:
        return _unplaced_anywhere(client, keys, q, period)
    # the scope's own count: (scope, member) of the metric one level up
    whole: tuple[tuple[str, ...], str]
    if h is None:
        whole = (("countries",), q.scope[2])
    elif family == "countries" or q.prefix is None:
        whole = (("torrents",), h)
    else:
        whole = (("countries", "t", h), q.prefix[:-1])
    try:
        total = _count_in(client, keys, period, *whole) or 0
        if hashed(q.scope):
            got = torrent_index.members(client, keys, period, q.scope, q.prefix or "")
            placed = sum(n for m, n in got.items() if is_place(m))
        else:
            placed = _index_sum(client, index_keys(keys, period, q.scope))
    except redis.RedisError as e:
        raise StoreError(f"reading counters failed: {e}") from e
    # below zero only when a peer's place changed within the window (a new database): none shown
    return max(0, int(total) - placed)


def _unplaced_anywhere(client: redis.Redis, keys: Keys, q: Query, period: str) -> int:
    """The peers no country holds (``countries``), or no city or postcode of any country (``q``
    across countries): see ``unplaced``."""
    scope = ("countries",)
    try:
        nowhere = _count_in(client, keys, period, scope, UNPLACED_MEMBER) or 0
        if not q.across_countries:
            return int(nowhere)
        countries = _countries(client, keys)
        total = _index_sum(client, index_keys(keys, period, scope))
        placed = _index_sum(client, [k for c in countries for k in index_keys(keys, period, q.scope + (c,))])
    except redis.RedisError as e:
        raise StoreError(f"reading counters failed: {e}") from e
    return max(0, int(total) - placed)


# Members summed per index_sum.lua call: about a millisecond of Redis each.
SUM_SLICE = 2000


def _index_sum(client: redis.Redis, index: list[str]) -> int:
    """The sum of every count in the sorted sets ``index``: their sizes, then one pipelined
    ``index_sum.lua`` call per slice of ``SUM_SLICE`` members (two round trips)."""
    pipe = client.pipeline(transaction=False)
    for k in index:
        pipe.zcard(k)
    script = register(client, "index_sum", package=__package__)
    calls = [(script, [k], [start, SUM_SLICE]) for k, n in zip(index, pipe.execute())
             for start in range(0, n, SUM_SLICE)]
    return sum(int(v) for v in run_pipelined(client, calls)) if calls else 0


def count(client: redis.Redis, keys: Keys, metric: Metric, month: str | None = None) -> int:
    """The value of one counter (0 if never incremented)."""
    scope, member = metric.indexes[0]
    return index_count(client, keys, LIFETIME if month is None else month, scope, member)


def index_count(client: redis.Redis, keys: Keys, period: str, scope: tuple[str, ...], member: str) -> int:
    """The count of ``member`` in one index (0 if absent): a metric's count as that index holds it.

    With several shards a place counter is read from its total, settled first.
    """
    try:
        if sharded(keys) and not of_torrents(scope):
            Rollup(client, keys).settle()
        n = _count_in(client, keys, period, scope, member)
    except redis.RedisError as e:
        raise StoreError(f"reading counters failed: {e}") from e
    return 0 if n is None else int(n)


def _count_in(client: redis.Redis, keys: Keys, period: str, scope: tuple[str, ...], member: str):
    """The count of ``member`` in the index ``scope`` of ``period``, None if absent."""
    if hashed(scope):
        return torrent_index.count(client, keys, period, scope, member)
    return client.zscore(member_key(keys, period, scope, member), member)


def _order(row: tuple) -> tuple:
    return (-row[1], row[0].encode("utf-8") if isinstance(row[0], str) else row[0])


def _top_merged(client: redis.Redis, sources: list[tuple[str, str]], limit: int) -> list[tuple[str, float]]:
    """The ``limit`` first ``(label + member, count)`` of sorted-set indexes holding disjoint names.

    ``sources``: ``(label, key)`` pairs. Exact: the first ``limit`` of the
    union are among each key's first ``limit``; one pipelined ZREVRANGE per
    key, then (when the last count kept may have more holders) one
    ZRANGE BYSCORE per key to settle the ties by name.
    """
    pipe = client.pipeline(transaction=False)
    for _, k in sources:
        pipe.zrevrange(k, 0, limit - 1, withscores=True)
    rows = sorted(((label + m.decode(), s) for (label, _), got in zip(sources, pipe.execute()) for m, s in got),
                  key=_order)
    if len(rows) < limit:
        return rows
    last = rows[limit - 1][1]
    pipe = client.pipeline(transaction=False)
    for _, k in sources:
        pipe.zrangebyscore(k, last, last, start=0, num=limit, withscores=True)
    tied = [[(label + m.decode(), s) for m, s in got] for (label, _), got in zip(sources, pipe.execute())]
    return _settle_ties(rows, limit, tied)


def _settle_ties(ranked: list, limit: int, tied: list[list]) -> list:
    """``ranked`` (in ``_order``, at least ``limit`` rows) cut exactly at ``limit``: every
    row above the last kept count, then the first of ``tied`` (rows holding exactly
    that count)."""
    last = ranked[limit - 1][1]
    above = [r for r in ranked[:limit] if r[1] > last]
    ties = sorted((r for t in tied for r in t), key=_order)
    return above + ties[: limit - len(above)]


def _top_across_countries(client: redis.Redis, keys: Keys, q: Query, period: str, limit: int) -> list:
    """The ``limit`` first (``"<country>.<name>"``, count) of every country's index of ``q``'s family.

    Exact: the global first ``limit`` are among each country's first
    ``limit``. Countries come from the lifetime countries index: a place
    counted in any period had its country counted in the lifetime one.
    """
    (ckey,) = index_keys(keys, LIFETIME, ("countries",))
    countries = _countries(client, keys)
    if not countries:
        return []
    sources = [(c + ".", k) for c in countries for k in index_keys(keys, period, q.scope + (c,))]
    return _top_totals(client, sources, limit) if sharded(keys) else _top_merged(client, sources, limit)


def _countries(client: redis.Redis, keys: Keys) -> list[str]:
    """Every country counted (the lifetime countries index), the member of the unplaced left out."""
    (ckey,) = index_keys(keys, LIFETIME, ("countries",))
    return [c.decode() for c in cast(list[bytes], client.zrange(ckey, 0, -1)) if is_place(c)]  # not decoded


def _top_totals(client: redis.Redis, sources: list[tuple[str, str]], limit: int) -> list[tuple[str, int]]:
    """``_top_merged`` for many keys (a sharded crawl's totals): fewer rows per key, then more where needed.

    Each key answers its first rows already in ``_order`` (``top.lua``, one
    call per key, pipelined). A first round asks each of ``n`` keys for about
    ``2 * limit / n``; merged, the ``limit``-th row is the bar. A key whose
    last row ranks before the bar may hold more rows that do, and only those
    keys are asked again for ``limit``: exact (names are disjoint across
    keys, so a key's unseen rows rank after its last), and a read of 1,024
    shards parses a few thousand rows, not twenty thousand.
    """
    script = register(client, "top", package=__package__)
    first = min(limit, -(-2 * limit // len(sources)) + 1)

    def read(which: list[int], k: int) -> list[list]:
        calls = [(script, [sources[i][1]], [k]) for i in which]
        got = run_pipelined(client, calls)
        return [[(sources[i][0] + flat[j].decode(), int(float(flat[j + 1]))) for j in range(0, len(flat), 2)]
                for i, flat in zip(which, got)]

    per = read(list(range(len(sources))), first)
    if first < limit:
        rows = sorted((r for part in per for r in part), key=_order)
        bar = _order(rows[limit - 1]) if len(rows) >= limit else None
        again = [i for i, part in enumerate(per) if len(part) == first and (bar is None or _order(part[-1]) < bar)]
        if again:
            for i, part in zip(again, read(again, limit)):
                per[i] = part
    return sorted((r for part in per for r in part), key=_order)[:limit]
