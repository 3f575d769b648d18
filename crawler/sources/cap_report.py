"""The announce cap's use over the last minute, for ``status`` and the dashboard.

Whether a cap is the crawl's limit, and whether the caps let the plan (every
tracked torrent once per revisit interval) through (``rate_budget`` keeps the
caps)."""

from __future__ import annotations

import redis

from crawler import redact
from crawler.keys import Keys
from crawler.settings import Settings
from crawler.store.minute_figures import recent

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
