"""Reading the counters: the rankings behind ``peercrawl stats`` (SPEC §7).

Each query is one ZREVRANGE (or ZSCORE) on one index of ``names``; nothing
scans the keyspace, so it stays fast with millions of counters.
"""

from __future__ import annotations

import redis

from crawler.counters.names import LIFETIME, Metric, check_month, metric_of, query_for
from crawler.counters.recorder import index_key
from crawler.errors import StoreError
from crawler.keys import Keys


def top(
    client: redis.Redis,
    keys: Keys,
    family: str,
    *,
    torrent: str | None = None,
    country: str | None = None,
    month: str | None = None,
    limit: int = 20,
) -> list[dict]:
    """The largest counters of ``family`` as ``[{"metric", "count"}]``, largest first.

    ``torrent`` (40-hex) and ``country`` (an English name) narrow the scope;
    for ``countries`` with ``--country`` (or ``torrents`` with ``--torrent``)
    the answer is that one counter, if it exists. ``month`` (``YYYY-MM``)
    reads the month counters, whose metric names end in ``.<YYYY-MM>``.
    Ties are ordered by metric name. Raises ``ValueError`` on bad arguments,
    ``StoreError`` if Redis fails.
    """
    if limit < 1:
        raise ValueError("--limit must be at least 1")
    q = query_for(family, torrent, country)
    period = LIFETIME if month is None else check_month(month)
    suffix = "" if month is None else "." + month
    key = index_key(keys, period, q.scope)
    try:
        if q.prefix is not None:
            # One torrent's places (bounded by its peers), filtered server-side.
            rows = list(client.zscan_iter(key, match=_glob_literal(q.prefix) + "*", count=1000))
            rows.sort(key=lambda r: (-r[1], r[0]))
            rows = rows[:limit]
        elif q.member is not None:
            score = client.zscore(key, q.member)
            rows = [] if score is None else [(q.member.encode(), score)]
        else:
            rows = client.zrevrange(key, 0, limit - 1, withscores=True)
    except redis.RedisError as e:
        raise StoreError(f"reading counters failed: {e}") from e
    out = [{"metric": metric_of(q, m.decode()) + suffix, "count": int(c)} for m, c in rows]
    out.sort(key=lambda r: (-r["count"], r["metric"]))
    return out


def count(client: redis.Redis, keys: Keys, metric: Metric, month: str | None = None) -> int:
    """The value of one counter (0 if never incremented)."""
    scope, member = metric.indexes[0]
    score = client.zscore(index_key(keys, LIFETIME if month is None else month, scope), member)
    return 0 if score is None else int(score)


def _glob_literal(s: str) -> str:
    """``s`` as a Redis glob pattern matching only itself."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in s)
