"""A visit's source notes: what those read let it ask, and the notes it leaves.

Notes (``crawler.queue.source_notes``) read become a ``Plan`` (``plan_of``); what the visit
learned becomes the notes to keep (``notes_made``), and a failed visit's reason the text kept
on its torrent (``failure_text``).

Per tracker, a visit notes now + its ``min interval`` (HTTP trackers), else now +
``tracker_floor`` (default 0: BEP 15 replies carry no min interval, and the
revisit interval, 1800 s by default, already spaces announces); the DHT's
schedule (``crawler.sources.dht.dht_schedule``); and what each source did on
this visit (``torrent`` shows it). None are written when they are what the plan
read and live long enough as they are. Pure functions: the caller reads and
writes them (``workers.visit``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from crawler import redact
from crawler.queue import source_notes as notes
from crawler.queue.visit_plan import Planned
from crawler.sources.dht import dht_schedule
from crawler.sources.result import SourceResult
from workers.scrape_ahead import asked

# Not-before entries outlive the longest min interval a tracker may ask for.
MIN_INTERVAL_CAP = 6 * 3600.0
# Revisit intervals a torrent's source notes are written to live past what a visit needs of them
# (``notes_made``): a write every ~(1 + this) revisits while nothing in them changes.
NOTES_SLACK = 2


class Plan(NamedTuple):
    """What a visit may ask: every tracker URL of the torrent and its source notes; the trackers by
    group (one per tracker), when the held ones may be asked again, the URL to ask of each eligible
    one and the URLs it stands for (``same``); whether the DHT is due; from when the torrent's
    metadata may be fetched (None: never); and the notes as stored, with when they expire
    (``Planned``)."""

    urls: list[str]
    noted: notes.SourceNotes
    groups: list
    held_until: list[float]
    eligible: list[str]
    same: dict[str, str]
    dht: bool
    fetch_from: float | None
    raw_notes: dict[str, str]
    notes_until: float


def plan_of(urls: list[str], planned: Planned, start: float, one_ask: bool,
            backing_off_until: Callable[[str], float | None], has_dht: bool) -> Plan:
    """What a visit at ``start`` may ask of a torrent's ``urls`` with its notes as read (``planned``): one
    URL per tracker (its UDP and HTTP URLs are one swarm store, with ``one_ask``), held while any of
    its URLs is inside its min interval, else asked at its preferred URL; and the DHT (``has_dht``)
    when its schedule says so."""
    noted = planned.notes
    groups, held_until, eligible, same = asked(urls, noted.not_before, start, one_ask, backing_off_until)
    return Plan(urls, noted, groups, held_until, eligible, same, has_dht and noted.dht_not_before <= start,
                planned.fetch_from, planned.raw_notes, planned.notes_until)


def not_before(r: SourceResult, now: float, floor: float) -> float:
    """When a tracker that answered ``r`` may be asked again: its min interval, else ``floor``, capped."""
    wait = r.min_interval if r.min_interval is not None else floor
    return now + min(max(wait, 0.0), MIN_INTERVAL_CAP)


def notes_made(plan: Plan, results: list[SourceResult], now: float, mirrored: dict[str, str], settings,
               has_dht: bool, note_args: Callable[..., list | None]) -> tuple[float, list | None]:
    """What a visit learned about its torrent's sources: when the DHT is next due (0: next visit), and
    the arguments that keep it in one step (``note_args``: ``VisitPlan.note_args``; None: nothing to
    keep). ``mirrored``: the trackers a mirror stood in for.

    ``plan.noted.not_before`` is updated in place with the trackers' new times."""
    urls, noted, same, dht = plan.urls, plan.noted, plan.same, plan.dht
    s = settings
    fresh = {r.source: not_before(r, now, s.tracker_floor) for r in results if r.ok and r.source != "dht"}
    fresh = {u: t for u, t in fresh.items() if t > now}
    noted.not_before.update(fresh)
    fields = {u: repr(t) for u, t in fresh.items()}
    drop: tuple[str, ...] = ()
    looked = next((r for r in results if r.source == "dht"), None)
    dht_next = noted.dht_not_before
    if looked is not None and looked.ok:
        empty, dht_next = dht_schedule.after_lookup(bool(looked.peers), noted.dht_empty, now,
                                                    s.revisit_seconds, s.dht_empty_visits)
        if empty:
            fields[notes.DHT_EMPTY] = str(empty)
        if dht_next:
            fields[notes.DHT] = repr(dht_next)
        drop = tuple(f for f, keep in ((notes.DHT_EMPTY, empty), (notes.DHT, dht_next)) if not keep)
    codes = dict.fromkeys(same, "d") | dict.fromkeys(mirrored, "m") | {r.source: tracker_code(r) for r in results
                                                                       if r.source != "dht"}
    fields[notes.LAST] = notes.last(urls, codes, dht_code(has_dht, dht, looked))
    # The notes live until the last time they hold has passed, and two revisit intervals at least;
    # written with two more, so the revisits that change nothing in them (most, where trackers
    # give no min interval) rewrite nothing until what is left falls short of that.
    held = [t - now for t in noted.not_before.values()] + [dht_next - now]
    life = max(held + [0.0]) + 2 * s.revisit_seconds
    raw = plan.raw_notes
    if plan.notes_until >= now + life and not any(f in raw for f in drop) \
            and all(raw.get(f) == v for f, v in fields.items()):
        return dht_next, None
    return dht_next, note_args(fields, drop, life + NOTES_SLACK * s.revisit_seconds)


def tracker_code(r: SourceResult) -> str:
    """One tracker's code in the visit's notes (``source_notes.TRACKER_CODES``)."""
    if r.asked == "backoff":
        return "b"
    if not r.ok:
        return "p" if r.blocked else "r" if r.refused else "f"
    return "s" if r.asked == "scrape" else "a"


def dht_code(has_dht: bool, due: bool, looked: SourceResult | None) -> str:
    """The DHT's code in the visit's notes (``source_notes.DHT_CODES``)."""
    if not has_dht:
        return "-"
    if not due:
        return "k"
    return "a" if looked is not None and looked.ok else "f"


def failure_text(results: list[SourceResult], limit: int = 200) -> str:
    """Why a visit failed, in at most ``limit`` characters, as ``torrent`` shows it and Redis keeps it:
    the sources the address policy refused first (their message names the setting that allows them),
    then refusals, then the rest; tracker URLs redacted (their passkeys)."""
    ordered = sorted(results, key=lambda r: (not r.blocked, not r.refused))
    text = "; ".join(f"{redact.url(r.source)}: {redact.text(r.error or '', r.source)}" for r in ordered)
    if not text:
        return "no source to ask"
    return text if len(text) <= limit else text[: limit - 1] + "…"
