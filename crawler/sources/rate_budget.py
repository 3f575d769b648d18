"""A rate budget: requests per second shared by every worker of a namespace.

Three budgets are its instances. The announce cap (contract §3):
``PEERCRAWL_MAX_ANNOUNCES_PER_SECOND`` caps the namespace's tracker requests
and ``URL|MAXPEERS|RATE`` in ``PEERCRAWL_TRACKERS`` one tracker's. A request
is what a tracker receives: an announce or its withdrawal (``stopped``), so a
visit's announce to one tracker takes two, or a scrape (one per packet or
HTTP request, however many torrents it carries: ``scrape_groups``). UDP
connects (one a minute per tracker, BEP 15) and retries of lost datagrams
are not counted. The DHT's lookups (``PEERCRAWL_MAX_DHT_LOOKUPS_PER_SECOND``)
and the metadata fetches (``PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND``) are
budgets of one rate, one request each, over keys of their own.

Strategy. One schedule per rate in Redis (``rate_budget.lua``): a request
goes at the latest of now and its rates' next free times, each then moves
one interval on, so requests leave evenly spaced (a per-minute counter
would let a minute's whole allowance out in its first seconds). A visit
asks for all its requests at once and gets, per tracker, how long to wait
before sending; its deadline starts after that wait, so waiting is never a
failure and never touches a score. The asks of greenlets asking together
share one call (``GroupCommit``). Places are given in the order asked,
however far ahead: a visit asks once and sleeps once (no polling), and
since a greenlet waits for one visit at a time the queue is at most every
worker's greenlets long. A worker that dies strands the places of its
waiting visits; they pass unused, which slows the crawl for at most that
queue's length. With no rate set, a budget answers at once without Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.store import scripts
from crawler.store.group_commit import GroupCommit

# Requests per tracker of a visit: the announce and its withdrawal.
PER_TRACKER = 2
# Most requests in one call (a visit's own requests always go whole).
CALL_CAP = 4096


def interval_us(rate: float) -> int:
    """The spacing of a rate of ``rate`` requests per second, in whole microseconds."""
    return max(1, round(1e6 / rate))


class RateBudget:
    """Waits requests into a namespace-wide rate and, per member, rates of their own (module note).

    ``schedule`` and ``minute``: its keys (the next free times, and one minute's
    figures by minute number); ``rate``: requests per second of the whole (None
    or 0: none); ``rates``: member (a tracker URL) -> its own rate; ``per``: the
    requests of one member of a visit; ``what``: its name in errors.
    """

    def __init__(self, client: redis.Redis, *, schedule: str, minute: Callable[[int], str], rate: float | None,
                 rates: dict[str, float] | None = None, per: int = 1, what: str):
        self.schedule, self.minute = schedule, minute
        self.per, self.what = per, what
        self.every = interval_us(rate) if rate else 0
        self.gaps = {url: interval_us(r) for url, r in (rates or {}).items()}
        self.enabled = bool(self.every or self.gaps)
        self._script = scripts.register(client, "rate_budget", package="crawler.sources")
        self._commit = GroupCommit(self._serve, cap=CALL_CAP, size=lambda ask: ask[1] * len(ask[0]),
                                   stopped=lambda: StoreError(f"{what}: its sender stopped"))

    @classmethod
    def announce_cap(cls, client: redis.Redis, keys: Keys, settings: Settings) -> RateBudget:
        """The announce cap: the namespace's tracker requests and each capped tracker's."""
        return cls(client, schedule=keys.announce_cap, minute=keys.announce_cap_minute,
                   rate=settings.max_announces_per_second, rates=settings.tracker_rates(), per=PER_TRACKER,
                   what="announce cap")

    @classmethod
    def dht(cls, client: redis.Redis, keys: Keys, settings: Settings) -> RateBudget:
        """The DHT's budget: ``PEERCRAWL_MAX_DHT_LOOKUPS_PER_SECOND`` lookups (a BEP 33 scrape is one)."""
        return cls(client, schedule=keys.budget("dht"), minute=lambda m: keys.budget_minute("dht", m),
                   rate=settings.max_dht_lookups_per_second, what="DHT budget")

    @classmethod
    def metadata(cls, client: redis.Redis, keys: Keys, settings: Settings) -> RateBudget:
        """The metadata fetches' budget: ``PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND``."""
        return cls(client, schedule=keys.budget("metadata"), minute=lambda m: keys.budget_minute("metadata", m),
                   rate=settings.max_metadata_fetches_per_second, what="metadata budget")

    def take(self, urls: list[str], per: int | None = None) -> dict[str, float]:
        """Seconds from now before sending to each of ``urls`` its ``per`` requests (default: the
        budget's; the announce cap's is an announce and its withdrawal, a scrape is one); blocks
        while Redis answers.

        Raises ``StoreError`` when Redis fails.
        """
        return dict(zip(urls, self.take_each(urls, per)))

    def take_each(self, urls: list[str], per: int | None = None) -> list[float]:
        """``take`` with each entry of ``urls`` its own place (a URL may come again: a batch's
        announces to one tracker), the waits in order."""
        if not self.enabled or not urls:
            return [0.0] * len(urls)
        return self._commit.ask((tuple(urls), per or self.per))

    def wait(self) -> float:
        """Seconds from now before one request of a budget with no members (the DHT's, the
        metadata fetches')."""
        return self.take(["*"], 1)["*"]

    def _serve(self, visits: list[tuple[tuple[str, ...], int]]) -> list[list[float]]:
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
        return [[int(reply[per * i]) / 1e6 for i in range(len(urls))] for (urls, per), reply in zip(visits, replies)]
