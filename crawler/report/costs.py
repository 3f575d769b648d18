"""What a visit costs the sources, over the last hour: ``status --json``'s ``costs``.

Read from the per-minute request counts the workers write
(``crawler.sources.request_counts``): the tracker requests of each kind and
their rate, per busiest tracker (the rest summed), the DHT lookups, and two
ratios. Requests per visit divides the tracker requests by the visits
completed in the same minutes (``QueueView.visits_since``'s count, which the
caller passes), so the two are read over one window: the minutes that
began in the last hour, this one included (59 to 60 minutes). Pairs per
1,000 requests divides the (IP, torrent) pairs the visits counted as new by
the tracker requests; a DHT lookup (dozens of queries to other people's
nodes) is in neither ratio, it has its own rate. ``last_minute`` gives the
rates over the last minute and this one, as the announce cap's figures do.
"""

from __future__ import annotations

import redis

from crawler import redact
from crawler.keys import Keys
from crawler.sources.request_counts import COUNTED, DHT, DHT_SCRAPE_QUERIES, DHT_SCRAPES, KINDS, Tally
from crawler.store.minute_figures import each_minute

# The minutes read: this one and the 59 before it (those that began in the last hour).
MINUTES = 60


def costs_report(client: redis.Redis, keys: Keys, top: int, now: float, visits: int) -> dict:
    """The costs of the last hour (module note); ``top`` trackers one by one, the rest summed;
    ``visits``: the visits completed over the same minutes. Raises ``StoreError``."""
    minute = int(now) // 60
    first = minute - MINUTES + 1
    hashes = each_minute(client, keys.request_minute, range(first, minute + 1), "the request counts")
    hour, recent = Tally(hashes), Tally(hashes[-2:])
    seconds = now - first * 60
    requests = hour.requests
    counted = hour.totals.get(COUNTED, 0)
    shown: dict[str, dict[str, int]] = {}
    for url, per_kind in hour.trackers.items():  # redacted as status shows every tracker (passkeys out)
        row = shown.setdefault(redact.url(url), {})
        for kind, n in per_kind.items():
            row[kind] = row.get(kind, 0) + n
    ranked = sorted(shown, key=lambda u: (-sum(shown[u].values()), u))
    others = dict(hour.others)
    for url in ranked[top:]:
        for kind, n in shown[url].items():
            others[kind] = others.get(kind, 0) + n
    return {
        "window_s": round(seconds, 1),
        "tracker_requests": requests,
        **_rates(hour.totals, seconds),
        "dht_lookups": hour.totals.get(DHT, 0),
        "dht_lookups_per_second": _rate(hour.totals.get(DHT, 0), seconds),
        "dht_scrapes": hour.totals.get(DHT_SCRAPES, 0),
        "dht_scrape_queries": hour.totals.get(DHT_SCRAPE_QUERIES, 0),
        "visits": visits,
        "requests_per_visit": round(requests / visits, 2) if visits else None,
        "counted": counted,
        "counted_per_1000_requests": round(counted * 1000 / requests, 1) if requests else None,
        "last_minute": {"window_s": round(now - (minute - 1) * 60, 1),
                        **_rates(recent.totals, now - (minute - 1) * 60),
                        "dht_lookups_per_second": _rate(recent.totals.get(DHT, 0), now - (minute - 1) * 60)},
        "trackers": {url: _rates(shown[url], seconds) for url in ranked[:top]},
        "trackers_other": {"trackers": len(ranked[top:]), **_rates(others, seconds)},
    }


def _rates(per_kind: dict[str, int], seconds: float) -> dict:
    """``requests`` (kind -> count, ``total``) and ``per_second`` (the same per second) of ``per_kind``."""
    counts = {k: per_kind.get(k, 0) for k in KINDS}
    counts["total"] = sum(counts.values())
    return {"requests": counts, "per_second": {k: _rate(n, seconds) for k, n in counts.items()}}


def _rate(n: int, seconds: float) -> float:
    """``n`` per second over ``seconds``, to four decimals (one request an hour still shows)."""
    return round(n / seconds, 4) if seconds > 0 else 0.0
