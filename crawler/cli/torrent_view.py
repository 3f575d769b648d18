"""``peercrawl torrent HASH`` for people: the torrent, where it stands, its sources, swarm and visits
(``--json``: ``QueueView.torrent``'s answer).

Tracker URLs, names and visit errors are others' text: every one goes through ``safe_text.terminal``
and is escaped for rich's markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crawler.cli import human
from crawler.safe_text import terminal

# What a visit's source outcome means for the reader, beside the code's words (source_notes).
ALLOWS = {"refused by the address policy": "PEERCRAWL_ALLOW_PRIVATE=1 allows it"}


def _text(v) -> str:
    return escape(terminal(human.value(v)))


def _pairs(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for name, v in rows:
        t.add_row(name, v)
    return t


def _what(info: dict, width: int) -> Table:
    pinned = info.get("pinned")
    pin = human.NONE if pinned is None else "for ever" if pinned == "forever" else f"until {human.date(pinned)}"
    rows = [
        ("info hash", info["info_hash"]),
        ("name", _text(info.get("name")) if info.get("name") else "— (not known yet)"),
        ("size", human.size(info.get("total_size"))),
        ("files", _text(info.get("file_count"))),
        ("lane", _text(info.get("lane"))),
        ("pinned", pin),
    ]
    trackers = info.get("trackers") or []
    for n, u in enumerate(trackers):
        rows.append(("trackers" if n == 0 else "", escape(terminal(human.url(u, width)))))
    if not trackers:
        rows.append(("trackers", "— (the default trackers only)"))
    return _pairs("What it is", rows)


def _where(info: dict, now: float) -> Table:
    state = info["state"]
    rows = [("state", state.replace("_", " "))]
    if state == "cooling":
        rows.append(("next visit", human.moment(info.get("due"), now)))
    if state == "in_flight":
        rows.append(("lease ends", human.moment(info.get("lease_deadline"), now)))
    if info.get("quarantine"):
        rows.append(("quarantined", _text(info["quarantine"]["message"]) + " (add --readmit HASH returns it)"))
    if info.get("tombstone"):
        tomb = info["tombstone"]
        rows.append(("evicted", f"{_text(tomb.get('reason'))}, {human.moment(tomb.get('at'), now)} "
                                "(add --readmit HASH tracks it again)"))
    rows += [
        ("score", _text(info.get("score"))),
        ("visits", f"{info['visits']:,} ({info['failed_visits']:,} failed), claimed {human.times(info['claims'])}"),
        ("first visit", human.moment(info.get("first_visit"), now)),
        ("last visit", human.moment(info.get("last_visit"), now)
         + (f", {info['last_outcome']}" if info.get("last_outcome") else "")),
        ("last peers seen", human.moment(info.get("last_peers"), now)),
    ]
    if info.get("at_risk_from"):
        rows.append(("at risk", f"since {human.moment(info['at_risk_from'], now)}: its next visit without peers "
                                "evicts it (torrent HASH --pin keeps it)"))
    if info.get("expired_leases_in_a_row"):
        rows.append(("expired leases in a row", str(info["expired_leases_in_a_row"])))
    if info.get("last_failure"):
        rows.append(("last failure", human.moment(info["last_failure"], now)))
        rows.append(("why", _text(info.get("last_error"))))
    return _pairs("Where it stands", rows)


def _sources(info: dict, now: float, width: int) -> Table | None:
    last = info.get("last_visit_sources")
    if not last:
        return None
    t = Table(title="What its sources said last", title_justify="left")
    t.add_column("source", no_wrap=True)
    t.add_column("last visit", overflow="fold")
    t.add_column("asked again", no_wrap=True)
    not_before = info.get("tracker_not_before") or {}
    # a tracker list changed since the visit: its outcomes in order, unnamed (source_notes.read_last)
    unnamed = ((f"tracker {n}", w) for n, w in enumerate(last.get("trackers_unnamed") or [], 1))
    items = list((last.get("trackers") or {}).items()) + list(unnamed)
    for u, what in items:
        hint = next((f"; {why}" for code, why in ALLOWS.items() if what.startswith(code)), "")
        t.add_row(escape(terminal(human.url(u, max(24, width - 15)))), escape(what + hint),
                  human.age(not_before[u], now) if not_before.get(u, 0) > now else "next visit")
    dht = info.get("dht_schedule") or {}
    nxt = dht.get("next_lookup")
    empty = dht.get("empty_lookups_in_a_row") or 0
    t.add_row("DHT", escape(last.get("dht") or human.NONE)
              + (f"; {empty} lookups in a row found nobody" if empty else ""),
              human.age(nxt, now) if nxt and nxt > now else "next visit")
    return t


def _swarm(info: dict) -> Table:
    estimated = " (estimated from DHT nodes' filters)" if info.get("counts_estimated") else ""
    return _pairs("Its swarm", [
        ("seeders", _text(info.get("seeders")) + estimated),
        ("leechers", _text(info.get("leechers")) + estimated),
        ("peers last visit", _text(info.get("peers_last_visit"))),
        ("reported last visit", _text(info.get("reported_last_visit"))),
        ("counted last visit", _text(info.get("counted_last_visit"))),
        ("coverage", human.percent(info.get("coverage"))),
        ("counted in 30 days", _text(info.get("counted_30_days"))),
    ])


def _history(info: dict, now: float) -> Table | None:
    hist = info.get("history") or []
    if not hist:
        return None
    title = "Its last completed visit" if len(hist) == 1 else f"Its last {len(hist)} completed visits"
    t = Table(title=title, title_justify="left")
    t.add_column("when", no_wrap=True)
    for col in ("peers", "seeders", "leechers", "score after"):
        t.add_column(col, justify="right")
    for h in reversed(hist):
        t.add_row(human.moment(h["at"], now), _text(h["peers"]), _text(h["seeders"]), _text(h["leechers"]),
                  _text(h["score"]))
    return t


def render(info: dict, now: float, console: Console | None = None) -> None:
    """Print ``info`` (``QueueView.torrent``'s answer, URLs redacted) in sections."""
    con = console or Console(highlight=False)
    width = max(40, con.width - 30)
    title = info.get("name") or info["info_hash"]
    con.print(f"[bold]{escape(terminal(title))}[/]", soft_wrap=True)
    for part in (_what(info, width), _where(info, now), _sources(info, now, width), _swarm(info),
                 _history(info, now)):
        if part is not None:
            con.print()
            con.print(part)
