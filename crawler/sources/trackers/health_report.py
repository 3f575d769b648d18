"""Tracker health as ``status`` and the dashboard read it: the busiest trackers, and the rest summed.

``health`` writes a tracker's health (``keys.tracker_health``, indexed by
``keys.tracker_rank``, with its sums in ``keys.tracker_totals``); these read
it in a bounded number of commands whatever the number of trackers, every
URL and message redacted.
"""

from __future__ import annotations

import json
import time
from typing import cast

import redis

from crawler import redact
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.sources.trackers.health import SUMS


def tracker_report(client: redis.Redis, keys: Keys, limit: int) -> dict[str, dict]:
    """The health of the ``limit`` busiest trackers (answers + failures + refusals) for
    ``status --json``, busiest first, keyed by the redacted URL.

    Per tracker: ``answers``, ``failures``, ``refusals``, ``last_refusal``
    (redacted message or None), ``backing_off``, ``until`` (unix time or
    None), ``peers_cut`` (peers dropped past the per-source bound),
    ``learned_cap`` (entries per reply the tracker was seen to cap at, or
    None), ``no_scrape_until`` (unix time until which it is announced to
    without a scrape first, learned: it cannot scrape; or None) and
    ``last_used`` (unix time). Two commands of at most ``limit``
    entries, whatever the number of trackers. Raises ``StoreError``.
    """
    try:
        # bytes members: the client decodes no replies (redis-py's types cannot tell)
        urls = cast(list[bytes], client.zrevrange(keys.tracker_rank, 0, max(limit, 0) - 1)) if limit > 0 else []
        rows = client.hmget(keys.tracker_health, urls) if urls else []
    except redis.RedisError as e:
        raise StoreError(f"reading tracker health: {e}") from e
    now = time.time()
    out = {}
    for url, raw in zip(urls, rows):
        if raw is None:  # pruned between the two reads
            continue
        try:
            h = json.loads(raw)
        except ValueError:
            h = {}
        until = float(h.get("until", 0) or 0)
        no_scrape = float(h.get("no_scrape_until", 0) or 0)
        cap = h.get("cap")
        out[redact.url(url.decode("utf-8", "replace"))] = {
            "answers": int(h.get("answers", 0)),
            "failures": int(h.get("failures", 0)),
            "refusals": int(h.get("refusals", 0)),
            "last_refusal": h.get("last_refusal") or None,
            "last_failure": h.get("last_failure") or None,
            "failing": int(h.get("streak", 0) or 0) > 0,
            "blocked": int(h.get("blocked", 0) or 0),
            "last_blocked": h.get("last_blocked") or None,
            "backing_off": until > now,
            "until": until if until > now else None,
            "peers_cut": int(h.get("cut", 0)),
            "learned_cap": int(cap) if cap else None,
            "no_scrape_until": no_scrape if no_scrape > now else None,
            "last_used": h.get("used"),
        }
    return out


def tracker_others(client: redis.Redis, keys: Keys, shown: dict[str, dict]) -> dict:
    """What every tracker not in ``shown`` (a ``tracker_report``) adds up to. Raises ``StoreError``.

    ``trackers``: how many entries tracker health holds besides the shown
    ones; ``answers``, ``failures``, ``refusals``, ``peers_cut``: the sums
    over every entry (kept with each write and prune) less the shown ones'.
    Two O(1) commands.
    """
    try:
        p = client.pipeline(transaction=False)
        p.hlen(keys.tracker_health)
        p.hmget(keys.tracker_totals, [field for field, _ in SUMS])
        count, sums = p.execute()
    except redis.RedisError as e:
        raise StoreError(f"reading tracker health: {e}") from e
    out = {"trackers": max(int(count) - len(shown), 0)}
    for (_, name), total in zip(SUMS, sums):
        out[name] = max(int(total or 0) - sum(int(x.get(name) or 0) for x in shown.values()), 0)
    return out
