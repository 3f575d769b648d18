"""How much of each swarm the crawler sees: counted IPs against the swarm size the sources report.

A tracker answers an announce with at most its own maximum of peers (200,
often 50-80) and says how many seeders and leechers it knows; the DHT gives
what its nodes hold. So a count covers part of a swarm, and analysts need
to know which part (docs/metrics.md, "Coverage", says how to read it).

Per torrent, ``complete.lua`` keeps in the torrent's HASH, in the visit's
own atomic step:

- ``reported``: the swarm size the last visit's sources reported, the
  largest seeders + leechers one answering source gave
  (``VisitResult.reported``); absent when the last visit had none;
- ``counts_estimated``: present while the seeders, leechers and
  ``reported`` are the DHT's BEP 33 estimates (``crawler.sources.dht.dht_sizes``),
  not a tracker's counts;
- ``peers_last_visit``: the distinct IPs that visit counted;
- ``n:<unix day>``: the IPs first counted that day in the 30-day dedupe
  (the recorder's answer for the visit), for the last 30 days (the day of
  the torrent's last visit and the 29 before), so their sum is the
  distinct IPs counted in the last 30 days.

``coverage`` is counted / reported of the last visit. It can pass 1 (the DHT
and several trackers together find more than one tracker reports) and says
nothing when nothing was reported.

Over the catalogue, ``complete.lua`` adds each visit's counted IPs and
reported size to the queue shard's rates HASH (``cc:<minute>``,
``cr:<minute>``), only for visits that had a reported size; ``catalogue``
sums the minutes of the last hour: the coverage of the visits of the last
hour, each visit weighing by its swarm's size.

The 30-day figure comes from the visit's completion, so a worker killed
between recording a visit and completing it leaves those IPs counted in the
counters but not in this figure (the retry finds them already counted).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.rates import WINDOW_SECONDS, field_time

DAYS = 30
DAY = 86400


def of_torrent(fields: dict[str, str], now: float) -> dict:
    """The coverage figures of one torrent from its HASH (decoded ``fields``)."""
    reported = int(fields["reported"]) if "reported" in fields else None
    counted = int(fields["peers_last_visit"]) if "peers_last_visit" in fields else None
    today = int(now // DAY)
    days = 0
    for name, value in fields.items():
        if name.startswith("n:"):
            try:
                day = int(name[2:])
            except ValueError:
                continue
            if today - DAYS < day <= today:
                days += int(value)
    return {
        "counts_estimated": fields.get("counts_estimated") == "1",
        "reported_last_visit": reported,
        "counted_last_visit": counted,
        "counted_30_days": days,
        "coverage": round(counted / reported, 4) if reported and counted is not None else None,
    }


def catalogue(hashes: list[dict], now: float) -> dict:
    """The catalogue's coverage over the last hour from every shard's rates HASH."""
    since = now - WINDOW_SECONDS
    counted = reported = 0
    for h in hashes:
        for field, n in h.items():
            name = field.decode() if isinstance(field, bytes) else field
            if not name.startswith(("cc:", "cr:")):
                continue
            minute = field_time(name)
            if minute is None or minute <= since:
                continue
            if name.startswith("cc:"):
                counted += int(n)
            else:
                reported += int(n)
    return {"window_s": WINDOW_SECONDS, "counted": counted, "reported": reported,
            "coverage": round(counted / reported, 4) if reported else None}


def read(client: redis.Redis, keys: Keys, hashes: Sequence[str], now: float) -> list[dict]:
    """``of_torrent`` of each of ``hashes`` in one pipelined round trip (``stats torrents``' rows).

    Each torrent's HASH is read in its own shard. Raises ``StoreError``."""
    if not hashes:
        return []
    p = client.pipeline(transaction=False)
    for h in hashes:
        p.hgetall(keys.for_torrent(h).torrent(h))
    try:
        got = p.execute()
    except redis.RedisError as e:
        raise StoreError(f"reading torrents' coverage failed: {e}") from e
    return [of_torrent({k.decode(): v.decode() for k, v in fields.items()}, now) for fields in got]
