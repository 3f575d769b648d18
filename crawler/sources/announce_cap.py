"""The announce cap: tracker requests per second across every worker of a namespace (contract §3).

``PEERCRAWL_MAX_ANNOUNCES_PER_SECOND`` caps the namespace's tracker requests;
``URL|MAXPEERS|RATE`` in ``PEERCRAWL_TRACKERS`` caps one tracker's. A request
is what a tracker receives: an announce or its withdrawal (``stopped``), so a
visit's announce to one tracker takes two, or a scrape (one per packet or
HTTP request, however many torrents it carries: ``scrape_groups``). UDP
connects (one a minute per tracker, BEP 15) and retries of lost datagrams
are not counted.

Strategy. One schedule per cap in Redis (``announce_cap.lua``): a request
goes at the latest of now and its caps' next free times, each cap then moves
one interval on, so requests leave evenly spaced (a per-minute counter
would let a minute's whole allowance out in its first seconds). Before a
visit announces, ``take(urls)`` asks for every request of the visit at once
and gets, per tracker, how long to wait before announcing to it; the visit's
deadline starts after that wait, so waiting is never a failure and never
touches a score. The asks of greenlets asking together share one call
(``GroupCommit``). Places are given in the order asked, however far ahead:
a visit asks once and sleeps once (no polling), and since a greenlet waits
for one visit at a time the queue is at most every worker's greenlets long.
A worker that dies strands the places of its waiting visits; they pass
unused, which slows the crawl for at most that queue's length.

With no cap set, ``take`` answers at once without Redis.

The DHT's budget (``PEERCRAWL_MAX_DHT_LOOKUPS_PER_SECOND``, ``dht_budget``)
is the same schedule over its own keys: one request per lookup, the
source name ``dht``, no per-source caps.
"""

from __future__ import annotations

import time

import redis

from crawler import redact
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.store import scripts
from crawler.store.group_commit import GroupCommit
from crawler.store.minute_figures import recent

# Requests per tracker of a visit: the announce and its withdrawal.
PER_TRACKER = 2
# Most requests in one call (a visit's own requests always go whole).
CALL_CAP = 4096


def interval_us(rate: float) -> int:
    """The spacing of a cap of ``rate`` requests per second, in whole microseconds."""
    return max(1, round(1e6 / rate))


class AnnounceCap:
    """Waits each visit's tracker requests into the namespace's and its trackers' caps (module note).

    ``rate``, ``rates``, ``per``, ``schedule`` and ``minute`` default to the announce cap's
    (``dht_budget`` gives the DHT's)."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings, *, rate: float | None = None,
                 rates: dict[str, float] | None = None, per: int = PER_TRACKER, schedule: str | None = None,
                 minute=None, what: str = "announce cap"):
        if schedule is None:
            rate, rates = settings.max_announces_per_second, settings.tracker_rates()
        self.schedule, self.minute = schedule or keys.announce_cap, minute or keys.announce_cap_minute
        self.per, self.what = per, what
        self.every = interval_us(rate) if rate else 0
        self.gaps = {url: interval_us(r) for url, r in (rates or {}).items()}
        self.enabled = bool(self.every or self.gaps)
        self._script = scripts.register(client, "announce_cap", package="crawler.sources")
        self._commit = GroupCommit(self._serve, cap=CALL_CAP, size=lambda ask: ask[1] * len(ask[0]),
                                   stopped=lambda: StoreError(f"{what}: its sender stopped"))

    @classmethod
    def dht_budget(cls, client: redis.Redis, keys: Keys, settings: Settings) -> AnnounceCap:
        """The DHT's budget: ``PEERCRAWL_MAX_DHT_LOOKUPS_PER_SECOND`` lookups, one request each, as a cap."""
        return cls(client, keys, settings, rate=settings.max_dht_lookups_per_second, per=1,
                   schedule=keys.budget("dht"), minute=lambda m: keys.budget_minute("dht", m), what="DHT budget")

    @classmethod
    def metadata_budget(cls, client: redis.Redis, keys: Keys, settings: Settings) -> AnnounceCap:
        """The metadata fetches' budget: ``PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND``, as a cap."""
        return cls(client, keys, settings, rate=settings.max_metadata_fetches_per_second, per=1,
                   schedule=keys.budget("metadata"), minute=lambda m: keys.budget_minute("metadata", m),
                   what="metadata budget")

    def take(self, urls: list[str], per: int | None = None) -> dict[str, float]:
        """Seconds from now before sending to each of ``urls`` its ``per`` requests (default: an
        announce and its withdrawal; a scrape is one); blocks while the caps are full.

        Raises ``StoreError`` when Redis fails.
        """
        if not self.enabled or not urls:
            return dict.fromkeys(urls, 0.0)
        return self._commit.ask((tuple(urls), per or self.per))

    def _serve(self, visits: list[tuple[tuple[str, ...], int]]) -> list[dict[str, float]]:
        capped: dict[str, int] = {}
        asks: list = []
        for urls, per in visits:
            asks.append(len(urls) * per)
            for u in urls:
                n = 0
                if u in self.gaps:
                    n = capped.setdefault(u, len(capped) + 1)
                asks.extend([n] * per)
        args: list = [self.every, len(capped)]
        for u in capped:
            args += [u, self.gaps[u]]
        args.append(len(visits))
        args += asks
        keys = [self.schedule, self.minute(int(time.time()) // 60)]
        try:
            replies = self._script(keys=keys, args=args)
        except redis.RedisError as e:
            raise StoreError(f"{self.what}: {e}") from e
        # each URL's first request is the one to wait for (an announce's withdrawal follows it)
        return [{u: int(reply[per * i]) / 1e6 for i, u in enumerate(urls)}
                for (urls, per), reply in zip(visits, replies)]


# A cap is "the limit" when at least this share of its requests was held
# back by it (its schedule was more than two intervals ahead of now): visits
# queue for it, so more workers would only queue longer.
LIMITING_SHARE = 0.5


def cap_report(client: redis.Redis, keys: Keys, settings: Settings, now: float) -> dict | None:
    """The caps and their use over the last minute and this one, for ``status``; None with no cap.

    Raises ``StoreError``.
    """
    rates = settings.tracker_rates()
    if not settings.max_announces_per_second and not rates:
        return None
    totals, seconds = recent(client, keys.announce_cap_minute, now, "the announce cap")

    def use(rate: float | None, suffix: str) -> dict:
        sent, held = totals.get("sent" + suffix, 0), totals.get("held" + suffix, 0)
        return {"per_second": rate, "sent_per_second": round(sent / seconds, 2),
                "limiting": bool(rate) and sent > 0 and held >= LIMITING_SHARE * sent}

    out = use(settings.max_announces_per_second, "")
    sent = totals.get("sent", 0)
    out.update(window_s=round(seconds, 1),
               mean_wait_s=round(totals.get("wait_us", 0) / 1e6 / sent, 3) if sent else None)
    # URLs as status shows every tracker: redacted (a passkey in a path stays out of reports)
    out["trackers"] = {redact.url(u): use(r, ":" + u) for u, r in sorted(rates.items())}
    out["limiting"] = out["limiting"] or any(t["limiting"] for t in out["trackers"].values())
    return out


def plan_report(cap: dict | None, visits: int, tracked: int, revisit_seconds: float) -> dict | None:
    """Whether the caps let the plan through: every tracked torrent visited once per revisit interval.

    ``cap``: ``cap_report``'s answer; ``visits``: the visits completed in its
    window. Each cap's requests per visit is what it granted over that window
    divided by those visits (the catalogue's own mix: scrapes shared by many
    visits, announces where swarms have peers); the plan needs that many
    times the plan's visits per second. A cap that allows fewer makes the
    catalogue's revisit interval really ``tracked × requests per visit /
    rate``. None with no cap, no visit in the window, or no finite plan
    (revisit interval 0).
    """
    if not cap or not visits or not revisit_seconds or not cap.get("window_s"):
        return None
    visits_per_second = visits / cap["window_s"]
    needed = tracked / revisit_seconds
    caps = ([("*", cap)] if cap.get("per_second") else []) + [
        (u, c) for u, c in cap["trackers"].items() if c.get("per_second")]
    out: dict = {"visits_needed_per_second": round(needed, 3), "caps": {}}
    really = revisit_seconds
    for name, c in caps:
        per_visit = c["sent_per_second"] / visits_per_second
        entry = {"requests_per_visit": round(per_visit, 3), "needed_per_second": round(needed * per_visit, 2),
                 "per_second": c["per_second"], "enough": needed * per_visit <= c["per_second"]}
        if not entry["enough"]:
            entry["revisit_seconds"] = round(tracked * per_visit / c["per_second"])
            really = max(really, tracked * per_visit / c["per_second"])
        out["caps"][name] = entry
    out["enough"] = all(e["enough"] for e in out["caps"].values())
    out["revisit_seconds_really"] = round(really)
    return out
