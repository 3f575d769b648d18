"""What each dashboard page shows, as JSON-able dicts (contract §10).

Every number comes from the functions behind ``stats`` and ``status``
(``crawler.counters.top``, ``crawler.report.queue_report.queue_report``,
``QueueView.torrent``), so the page shows what ``stats --json`` and
``status --json`` print. Each view returns ``{"tables": {name: rows}, ...}``:
a table is a list of flat dicts, the rows one chart draws, which is also
what its CSV link downloads.

Cost: each view is a handful of index reads (ZREVRANGE, HGETALL of one
torrent's index, one pipelined EXISTS per month probe); nothing grows with
the number of tracked torrents or places except the rows asked for. A
table of torrents reads their names in one pipelined round trip
(``crawler.torrents.torrent_names.read``); the page shows them as text.

Place names are shown as GeoIP spells them (``St. Louis``): a row's
``name`` and ``country`` are unescaped (``names.read_metric``, as
``export``'s columns), its ``metric`` the exact stat name. A country is
taken as a person types it (``germany``, ``DE``: ``rankings.resolve_country``).
A table of places (every country's, a torrent's, a country's) ends with the peers none of
its places holds (``rankings.unplaced``), when there are any: a row
``{"metric": None, "count", "name": "unplaced", "unplaced": True}``.
"""

from __future__ import annotations

import datetime as _dt
import time

import redis

from crawler.counters import top
from crawler.counters.csv_export import months_with_counters
from crawler.counters.names import LIFETIME, PLACE_COLUMN, UNPLACED, read_metric
from crawler.counters.rankings import resolve_country, unplaced
from crawler.counters.rollup import Rollup
from crawler.dashboard.countries import map_code
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.queue.torrent_record import shown
from crawler.queue.view import STATES, QueueView
from crawler.report.queue_report import queue_report
from crawler.torrents.torrent_names import read as read_names

# The queue states of ``status --json``, as the states chart and the /metrics gauge show them.
# Every country a month can hold (GeoLite2 knows ~250).
ALL_COUNTRIES = 1000


class Views:
    """The read model of the dashboard over one namespace. Raises ``StoreError``."""

    def __init__(self, client: redis.Redis, keys: Keys, settings):
        self.client, self.keys, self.settings = client, keys, settings
        self.queue = Queue(client, keys, settings)  # for queue_report's housekeeping
        self.view = QueueView(client, keys)

    # --- analysts -----------------------------------------------------------
    def months(self, now: float | None = None) -> list[str]:
        """The months (``YYYY-MM``, newest first) that have month counters."""
        return months_with_counters(self.client, self.keys, now)

    def _top(self, family: str, **kw) -> list[dict]:
        """``counters.top`` on totals ``_settle`` just settled (a page reads many rankings)."""
        return top(self.client, self.keys, family, settled=True, **kw)

    def _settle(self) -> None:
        """With several shards, bring the counter totals up to date once for the page (``counters.rollup``)."""
        if self.keys.counter_shards > 1:
            Rollup(self.client, self.keys).settle()

    def overview(self, month: str | None = None, limit: int = 20) -> dict:
        """The landing page: users per country (all of them) and the top torrents."""
        self._settle()
        countries = [_country_row(r) for r in self._top("countries", month=month, limit=ALL_COUNTRIES)]
        torrents = self._named([_torrent_row(r) for r in self._top("torrents", month=month, limit=limit)])
        return {
            "month": month,
            "months": self.months(),
            "total_users_in_countries": sum(r["count"] for r in countries),
            # then the peers no country holds, on no map
            "tables": {"countries": countries + [dict(r, map_code=None) for r in self._unplaced("countries", month=month)],
                       "torrents": torrents},
        }

    def _named(self, *tables: list[dict]) -> list[dict]:
        """Each row of ``tables`` (rows with an ``info_hash``) given its torrent's ``name`` (None: none),
        every table's in one round trip; returns the first table."""
        rows = [r for t in tables for r in t]
        for r, name in zip(rows, read_names(self.client, self.keys, [r["info_hash"] for r in rows])):
            r["name"] = name
        return tables[0] if tables else []

    def country(self, name: str, month: str | None = None, limit: int = 20) -> dict:
        """One country: its users, top cities and postcodes, users per month.

        ``name`` is the English name as the user reads it (``St. Louis`` style,
        unescaped) in any case, or its ISO code, as ``stats --country`` takes it.
        """
        self._settle()
        name = resolve_country(self.client, self.keys, name)
        users = self._top("countries", country=name, month=month, limit=1)
        cities, postcodes = ([_place_row(r) for r in self._top(fam, country=name, month=month, limit=limit)]
                             + self._unplaced(fam, country=name, month=month) for fam in ("cities", "postcodes"))
        months = self.months()
        return {
            "country": name,
            "month": month,
            "months": months,
            "users": users[0]["count"] if users else 0,
            "metric": users[0]["metric"] if users else None,
            "map_code": map_code(name),
            "tables": {"cities": cities, "postcodes": postcodes,
                       "months": self._per_month(months, "countries", country=name)},
        }

    def _unplaced(self, family: str, **scope) -> list[dict]:
        """The row of the peers no place of ``family`` in ``scope`` holds: none when there are none."""
        n = unplaced(self.client, self.keys, family, settled=True, **scope)
        if not n:
            return []
        return [{"metric": None, "count": n, "name": UNPLACED, "country": scope.get("country"), "unplaced": True}]

    def _per_month(self, months: list[str], family: str, **scope) -> list[dict]:
        """``{"month", "metric", "count"}`` of ``family``'s count in ``scope`` for each of ``months``, oldest first."""
        rows = []
        for m in reversed(months):
            got = self._top(family, month=m, limit=1, **scope)
            rows.append({"month": m, "metric": got[0]["metric"] if got else None,
                         "count": got[0]["count"] if got else 0})
        return rows

    def months_by_country(self, countries: int = 10) -> dict:
        """Users per month of the ``countries`` largest countries (lifetime), oldest month first."""
        self._settle()
        leaders = [_country_row(r) for r in self._top("countries", limit=countries)]
        names = [r["name"] for r in leaders]
        rows = []
        for m in reversed(self.months()):
            got = {_country_row(r)["name"]: r for r in self._top("countries", month=m, limit=ALL_COUNTRIES)}
            for name in names:
                r = got.get(name)
                rows.append({"month": m, "country": name, "metric": r["metric"] if r else None,
                             "count": r["count"] if r else 0})
        return {"countries": names, "tables": {"months": rows}}

    def torrent(self, info_hash: str, month: str | None = None, limit: int = 20) -> dict | None:
        """One torrent: its queue record (``torrent --json``), users by country, cities, months."""
        self._settle()
        info = self.view.torrent(info_hash, time.time(), tuple(t.url for t in self.settings.trackers))
        if info is not None:  # tracker URLs may carry passkeys: redacted as ``torrent --json`` shows them
            info = shown(info)
        users = self._top("torrents", torrent=info_hash, month=month, limit=1)
        if info is None and not users:
            return None
        countries = [_country_row(r) for r in self._top("countries", torrent=info_hash, month=month,
                                                        limit=ALL_COUNTRIES)]
        countries += [dict(r, map_code=None) for r in self._unplaced("countries", torrent=info_hash, month=month)]
        cities = [_place_row(r) for r in self._top("cities", torrent=info_hash, month=month, limit=limit)]
        cities += self._unplaced("cities", torrent=info_hash, month=month)
        visits = [{"at": _iso(v["at"]), **{k: v[k] for k in ("score", "peers", "seeders", "leechers")}}
                  for v in (info or {}).get("history", [])]
        months = self.months()
        return {
            "info_hash": info_hash,
            "month": month,
            "months": months,
            "users": users[0]["count"] if users else 0,
            "metric": users[0]["metric"] if users else None,
            "torrent": info,
            "tables": {"countries": countries, "cities": cities,
                       "months": self._per_month(months, "torrents", torrent=info_hash), "visits": visits},
        }

    # --- operators ----------------------------------------------------------
    def operators(self, hours: int = 6, now: float | None = None) -> dict:
        """``status --json`` plus visits per minute, the outbox backlog and Redis memory."""
        now = time.time() if now is None else now
        report = queue_report(self.queue, now)
        minutes = self.visits_per_minute(hours, now)
        trackers = [{"tracker": url, **h, "until": _iso(h["until"]),
                     "last_used": _iso(h["last_used"]) if isinstance(h["last_used"], (int, float)) else None}
                    for url, h in report["trackers"].items()]  # busiest first, as status shows them
        other = report.get("trackers_other") or {}
        if other.get("trackers"):
            trackers.append({"tracker": f"{other['trackers']} other trackers",
                             **{f: other[f] for f in ("answers", "failures", "refusals", "peers_cut")}})
        workers = [_worker_row(w) for w in report["workers"]]
        states = [{"state": s, "count": report[s]} for s in STATES]
        quarantined = [{"info_hash": q["info_hash"], "at": _iso(q["at"]), "reason": q["reason"]}
                       for q in report["quarantined_torrents"]]
        lanes = [{"lane": lane, **row} for lane, row in report["lanes"].items()]
        at_risk = [{"info_hash": x["info_hash"], "stage": x["stage"], "since": _iso(x["since"])}
                   for x in report["at_risk_torrents"]]
        self._named(quarantined, at_risk)
        costs = report["costs"]  # the busiest trackers' requests per second, then every other's summed
        cost_rows = [_cost_row(url, t) for url, t in costs["trackers"].items()]
        if costs["trackers_other"]["requests"]["total"]:
            cost_rows.append(_cost_row("every other tracker", costs["trackers_other"]))
        return {
            "status": report,
            "outbox": self.outbox(),
            "redis": report["redis"]["nodes"],
            "tables": {"states": states, "minutes": minutes, "workers": workers, "trackers": trackers,
                       "quarantined": quarantined, "lanes": lanes, "at_risk": at_risk, "costs": cost_rows},
        }

    def visits_per_minute(self, hours: int, now: float) -> list[dict]:
        """``[{"minute", "visits", "failed"}]`` for each minute of the last ``hours``, oldest first.

        The per-minute counts ``status`` sums (``QueueView.visits_since``): the
        last 60 rows add up to ``visits_last_hour`` at the same ``now``.
        """
        k = self.keys
        p = self.client.pipeline(transaction=False)
        p.hgetall(k.visits)
        p.hgetall(k.failed_visits)
        try:
            ok, failed = p.execute()
        except redis.RedisError as e:
            raise StoreError(f"reading visit counts failed: {e}") from e
        ok = {int(m): int(n) for m, n in ok.items()}
        failed = {int(m): int(n) for m, n in failed.items()}
        last = int(now // 60) * 60
        first = last - (hours * 60 - 1) * 60
        return [
            {"minute": _dt.datetime.fromtimestamp(m, _dt.UTC).strftime("%Y-%m-%dT%H:%MZ"),
             "visits": ok.get(m, 0), "failed": failed.get(m, 0)}
            for m in range(first, last + 60, 60)
        ]

    def outbox(self) -> dict:
        """StatHat backlog: stats waiting in the outboxes and in the batches being posted, summed over
        the shards (a stat owed by two shards counts twice)."""
        p = self.client.pipeline(transaction=False)
        for shard in self.keys.all_counter_shards:
            p.hlen(shard.outbox)
            p.hlen(shard.outbox_in_flight)
        try:
            got = p.execute()
        except redis.RedisError as e:
            raise StoreError(f"reading the StatHat outbox failed: {e}") from e
        waiting, in_flight = sum(got[0::2]), sum(got[1::2])
        return {"enabled": self.settings.stathat_ezkey is not None, "stats_waiting": waiting,
                "stats_in_flight": in_flight}



def _iso(t: float | None) -> str | None:
    return None if t is None else _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parts(metric: str) -> list[str]:
    return metric.split(".")


def _country_row(r: dict) -> dict:
    """``countries.<c>.users[.<month>]`` (or a torrent's) with its name, unescaped, and map shape."""
    name = read_metric(r["metric"])["country"]
    return {"metric": r["metric"], "count": r["count"], "name": name, "country": name, "map_code": map_code(name)}


def _place_row(r: dict) -> dict:
    """A city or postcode counter (or a torrent's) with its place's and its country's names, unescaped."""
    parts = read_metric(r["metric"])
    place = next(parts[k] for k in PLACE_COLUMN.values() if k in parts)
    return {"metric": r["metric"], "count": r["count"], "name": place, "country": parts["country"]}


def _torrent_row(r: dict) -> dict:
    return {"metric": r["metric"], "count": r["count"], "info_hash": _parts(r["metric"])[1]}


def _cost_row(tracker: str, t: dict) -> dict:
    """One tracker's row of the costs table: requests per second by kind over the last hour, and their count."""
    return {"tracker": tracker, **{f"{k}_per_s": v for k, v in t["per_second"].items()},
            "requests": t["requests"]["total"]}


def _worker_row(w: dict) -> dict:
    auto = w.get("autoscale")
    return {
        "id": w.get("id"), "host": w.get("host"), "pid": w.get("pid"), "concurrency": w.get("concurrency"),
        "auto": w.get("auto"), "in_flight": w.get("in_flight"), "visits": w.get("visits"),
        "visits_per_hour": w.get("visits_per_hour"), "failing": w.get("failing"),
        # the last decision of --concurrency auto: new size, the size before, and why
        "autoscale": None if not isinstance(auto, dict) else
        f"{auto.get('was')} -> {auto.get('size')}: {auto.get('why')}",
    }


__all__ = ["LIFETIME", "Views"]
