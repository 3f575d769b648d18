"""The peer sources' keys (contract §3). Tracker health, the rate budgets, request and discovery
figures, tracker intervals and the shared announce port."""

from __future__ import annotations

from crawler.keys.namespace import NamespaceKeys

# The namespace-wide budgets kept as the announce cap is: their keys' first part.
BUDGETS = {"dht": "dhtcap", "metadata": "mdcap"}

# The first part (after the namespace) of every key below.
RESERVED = frozenset({'announceport', 'cap', 'capm', 'dhtcap', 'dhtcapm', 'disc', 'mdcap', 'mdcapm', 'mi', 'reqm', 'trackerhealth', 'trackerrank', 'trackertotals', 'trackerused'})


class SourceKeys(NamespaceKeys):
    """The peer sources' keys (contract §3): tracker health, the rate budgets, request and discovery"""

    # --- trackers' health (contract §3) --------------------------------------
    @property
    def tracker_health(self) -> str:
        """HASH tracker URL -> JSON {answers, failures, refusals, last_refusal, streak, until, cut, cap,
        no_scrape_until, used}."""
        return self.name_home_key("trackerhealth")

    @property
    def tracker_used(self) -> str:
        """ZSET tracker URL -> unix time it was last used or last found named by a torrent (prunes tracker_health)."""
        return self.name_home_key("trackerused")

    @property
    def tracker_rank(self) -> str:
        """ZSET tracker URL -> answers + failures + refusals: the busiest trackers first (tracker_health.lua)."""
        return self.name_home_key("trackerrank")

    @property
    def tracker_totals(self) -> str:
        """HASH answers, failures, refusals, cut -> their sums over tracker health's ranked entries;
        walked -> unix time the last prune walk began (tracker_walk.lua)."""
        return self.name_home_key("trackertotals")

    # --- the announce cap (contract §3) ------------------------------------
    @property
    def announce_cap(self) -> str:
        """HASH: ``*`` (the namespace's cap) or a tracker URL -> the next free request time,
        whole microseconds of Redis's clock (crawler/sources/rate_budget.lua)."""
        return self.name_home_key("cap")

    def announce_cap_minute(self, minute: int) -> str:
        """HASH of one UTC minute (unix time // 60) of the cap, expiring after ten minutes:
        ``sent`` requests granted, ``held`` of them held back by the namespace's cap,
        ``wait_us`` their waits summed, ``refused`` visits told to ask again later, and
        ``sent:<url>``, ``held:<url>`` per capped tracker."""
        return self.name_home_key("capm", str(minute))

    def budget(self, name: str) -> str:
        """HASH ``*`` -> the next free time, as ``announce_cap``, of the DHT's lookups (``dht``) or the
        metadata fetches (``metadata``): their namespace-wide budgets."""
        return self.name_home_key(BUDGETS[name])

    def budget_minute(self, name: str, minute: int) -> str:
        """HASH of one minute of ``budget(name)``, as ``announce_cap_minute``."""
        return self.name_home_key(BUDGETS[name] + "m", str(minute))

    def request_minute(self, minute: int) -> str:
        """HASH of one UTC minute (unix time // 60) of requests sent to the sources, expiring after two hours
        (crawler/sources/request_counts.py): per kind, per busy tracker and kind, the others' summed."""
        return self.name_home_key("reqm", str(minute))

    # --- discovery (contract §3) ------------------------------------------
    def discovery_minute(self, minute: int) -> str:
        """HASH of one UTC minute (unix time // 60) of discovery, expiring after ten minutes:
        ``sampled`` hashes in BEP 51 answers, ``new`` of them not seen by that worker lately,
        ``admitted`` of those added to the discovered lane, ``queries`` sample queries sent."""
        return self.name_home_key("disc", str(minute))

    def tracker_min_interval(self, info_hash: str) -> str:
        """HASH tracker URL -> unix time before which it must not be re-announced."""
        return self.name_key("mi", info_hash)

    @property
    def announce_port(self) -> str:
        """STRING: the port every worker announces on when PEERCRAWL_ANNOUNCE_PORT is 0."""
        return self.name_home_key("announceport")
