"""Operator rates of the queue over the last hour (the statistics a work queue's operators watch, contract §1, §7).

- **claim serve rate**: torrents handed out / torrents asked for. Below 1
  when workers ask and nothing is ready: the catalogue is smaller than the
  workers, or everything cools (a work queue's "item request serve rate").
- **reclaim rate**: leases that expired before their visit completed / torrents
  handed out. Above 0 when workers are killed or visits outlive their lease
  (a work queue's "reclaim rate").
- **visit round trip**: from the claim to the completion of visits some
  source answered, p50 and p95 (its "RTT"). Failed visits end at the
  visit deadline and hand-backs end early; neither is a round trip.

Strategy. Each queue shard keeps a HASH ``{shard}:rates`` of per-minute
counts (a minute named by its first unix second, as the visit counts are;
the last hour is the minutes that began within it), written by the scripts that make the events, in the same atomic step:
``claim.lua`` adds ``a:<minute>`` (asked; only by the first shard a claim
asks, so a claim spread over shards is one request; a claim not sent because
every shard is known empty adds it to shard 0 alone), ``s:<minute>`` (handed
out) and ``r:<minute>`` (leases it found expired); ``complete.lua`` adds one
to ``rt:<minute>:<k>``, the round trip's bucket ``k`` (and the coverage sums
``cc:<minute>``, ``cr:<minute>``: ``crawler.queue.coverage``). Buckets grow by
2^(1/8) (9 %), so a percentile is known to ±4.5 %: ``k`` is
``floor(8 log2(milliseconds))`` (at least 0), and a percentile is reported
as its bucket's geometric middle. A round trip is what the worker measured
between its claim's reply and its completion. Minutes older than
``KEPT_SECONDS`` are dropped with the visit counts (``Queue.trim_visit_buckets``).
"""

from __future__ import annotations

import math

# Each bucket's upper edge is 2^(1/STEPS) of its lower one.
STEPS = 8
# Minutes kept: the last hour is read, and a second one leaves room for a late trim.
KEPT_SECONDS = 2 * 3600
WINDOW_SECONDS = 3600


def bucket(seconds: float) -> int:
    """The round-trip bucket of ``seconds``: ``floor(STEPS * log2(ms))``, at least 0."""
    ms = seconds * 1000.0
    return max(0, math.floor(STEPS * math.log2(ms))) if ms >= 1.0 else 0


def middle(k: int) -> float:
    """Seconds at the geometric middle of bucket ``k``."""
    return 2 ** ((k + 0.5) / STEPS) / 1000.0


def asked_field(minute: str) -> str:
    """The field of the torrents claims asked for in ``minute`` (``claim.lua`` adds to it too)."""
    return f"a:{minute}"


def rt_field(minute: str, seconds: float) -> str:
    """The field ``complete.lua`` adds one to for a round trip of ``seconds`` completed in ``minute``."""
    return f"rt:{minute}:{bucket(seconds)}"


def field_time(field: bytes | str) -> int | None:
    """The unix minute a field counts in, or None for a field this module does not write."""
    parts = (field.decode() if isinstance(field, bytes) else field).split(":")
    try:
        return int(parts[1]) if len(parts) >= 2 and parts[0] in ("a", "s", "r", "rt", "cc", "cr") else None
    except ValueError:
        return None


def percentile(histogram: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of a bucket histogram, as its bucket's middle; None when empty."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = q * total, 0
    for k in sorted(histogram):
        seen += histogram[k]
        if seen >= rank:
            return middle(k)
    return middle(max(histogram))


def rates_report(hashes: list[dict], now: float) -> dict:
    """``status``'s ``rates``, from every shard's rates HASH: the minutes of the last hour summed."""
    since = now - WINDOW_SECONDS
    sums = {"a": 0, "s": 0, "r": 0}
    histogram: dict[int, int] = {}
    for h in hashes:
        for field, n in h.items():
            minute = field_time(field)
            if minute is None or minute <= since:
                continue
            parts = (field.decode() if isinstance(field, bytes) else field).split(":")
            if parts[0] == "rt":
                k = int(parts[2])
                histogram[k] = histogram.get(k, 0) + int(n)
            elif parts[0] in sums:
                sums[parts[0]] += int(n)
    asked, served, reclaimed = sums["a"], sums["s"], sums["r"]

    def share(x: int, of: int) -> float | None:
        return round(x / of, 4) if of else None

    p50, p95 = percentile(histogram, 0.5), percentile(histogram, 0.95)
    return {
        "window_s": WINDOW_SECONDS,
        "claims_asked": asked,
        "claims_served": served,
        "claim_serve_rate": share(served, asked),
        "leases_reclaimed": reclaimed,
        "reclaim_rate": share(reclaimed, served),
        "visit_round_trip_s": {
            "visits": sum(histogram.values()),
            "p50": None if p50 is None else round(p50, 4),
            "p95": None if p95 is None else round(p95, 4),
        },
    }
