"""``peercrawl status``: the queue's health for operators (contract §7)."""

from __future__ import annotations

import json
import time

import click

from crawler.cli.context import open_context
from crawler.queue.transitions import Queue
from crawler.report.queue_report import queue_report
from crawler.safe_text import terminal


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def command(as_json: bool) -> None:
    """Show the queue: states, visits, latency, live workers and trackers."""
    ctx = open_context()
    report = queue_report(Queue(ctx.client, ctx.keys, ctx.settings), time.time())
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    _print(report)


def _print(r: dict) -> None:
    from rich.console import Console

    con = Console()
    _queue_table(con, r)
    _warnings(con, r)
    _cap(con, r.get("announce_cap"))
    _plan(con, r.get("plan"))
    _costs(con, r.get("costs"))
    d = r.get("discovery")
    if d:
        con.print(f"[bold]discovery:[/] per minute over the last {d['window_s']} s: {d['queries_per_minute']} "
                  f"queries, {d['sampled_per_minute']} hashes sampled, {d['new_per_minute']} new, "
                  f"{d['admitted_per_minute']} admitted")
    _lanes_table(con, r.get("lanes") or {})
    _workers_table(con, r["workers"])
    _trackers_table(con, r["trackers"], r.get("trackers_other"))
    _nodes_table(con, r["redis"])


def _queue_table(con, r: dict) -> None:
    from rich.table import Table

    t = Table(title="peercrawl queue", show_header=False)
    for name in ("tracked", "ready", "cooling", "in_flight", "quarantined", "evicted", "at_risk", "visits_last_hour",
                 "failed_visits_last_hour", "queue_latency_s"):
        t.add_row(name.replace("_", " "), str(r.get(name)))
    for name, value in (r.get("capacity") or {}).items():
        t.add_row(name.replace("_", " "), str(value))
    rates = r.get("rates") or {}
    if rates:
        def pct(x):
            return "-" if x is None else f"{100 * x:.1f} %"

        rt = rates["visit_round_trip_s"]
        t.add_row("claim serve rate (1 h)", f"{pct(rates['claim_serve_rate'])} of {rates['claims_asked']} asked")
        t.add_row("reclaim rate (1 h)", f"{pct(rates['reclaim_rate'])}: {rates['leases_reclaimed']} leases expired")
        t.add_row("visit round trip (1 h)", "-" if not rt["visits"] else
                  f"p50 {rt['p50']} s, p95 {rt['p95']} s over {rt['visits']} visits")
        cov = r.get("coverage") or {}
        if cov:
            t.add_row("coverage (1 h)", "-" if cov["coverage"] is None else
                      f"{pct(cov['coverage'])}: {cov['counted']:,} IPs counted of {cov['reported']:,} reported")
    shards = r.get("shards") or {}
    t.add_row("shards", f"{shards.get('queue')} queue, {shards.get('counters')} counters")
    con.print(t)


def _warnings(con, r: dict) -> None:
    """Quarantined torrents, Redis eviction, an outage, GeoIP read errors: each when there is one."""
    from rich.markup import escape

    if r.get("quarantined"):
        con.print(f"[bold yellow]quarantined:[/] {r['quarantined']} torrents whose lease expired again and again "
                  "(peercrawl torrent HASH says why; add --readmit HASH returns one)")
        for x in r.get("quarantined_torrents", []):
            con.print(f"  {x['info_hash']}  {x['reason']}")
    if r.get("at_risk"):
        con.print(f"[bold yellow]at risk:[/] {r['at_risk']} torrents that their next visit without peers evicts "
                  "(peercrawl torrent HASH --pin keeps one)")
        for x in r.get("at_risk_torrents", []):
            con.print(f"  {x['info_hash']}  {x['stage']}")
    if r.get("eviction_warning"):
        con.print(f"[bold red]warning:[/] {r['eviction_warning']}", soft_wrap=True)
    if r.get("outage"):
        con.print(f"[bold red]outage:[/] {r['outage']}")
    geo = r.get("geo_errors")
    if geo:
        kinds = geo.get("kinds") or {"read_error": geo["errors"]}
        if kinds.get("read_error"):
            con.print(f"[bold red]GeoIP read errors:[/] {kinds['read_error']} lookups failed (counted as unplaced); "
                      f"last: {escape(terminal(str(geo['last'])))}", soft_wrap=True)
        if kinds.get("name_too_long"):
            con.print(f"[bold red]GeoIP names too long:[/] {kinds['name_too_long']} (those peers count without "
                      "that part of their place)", soft_wrap=True)


def _lanes_table(con, lanes: dict) -> None:
    """Every state per lane, once any torrent is in a lane but normal."""
    from rich.table import Table

    if not any(sum(row.values()) for lane, row in lanes.items() if lane != "normal"):
        return
    from crawler.queue.view import STATES

    t = Table(title="lanes")
    t.add_column("lane")
    for s in STATES:
        t.add_column(s.replace("_", " "))
    for lane, row in lanes.items():
        t.add_row(lane, *(str(row[s]) for s in STATES))
    con.print(t)


def _cap(con, cap: dict | None) -> None:
    """The announce cap's use, and whether it is what holds the crawl back."""
    from rich.markup import escape

    if not cap:
        return
    wait = "" if cap["mean_wait_s"] is None else f", mean wait {cap['mean_wait_s']} s"
    line = f"[bold]announce cap:[/] {cap['sent_per_second']}/s sent over the last {cap['window_s']} s"
    if cap["per_second"]:
        line += f" of {cap['per_second']:g}/s allowed"
    con.print(line + wait)
    for url, t in cap["trackers"].items():
        con.print(f"  {escape(url)}: {t['sent_per_second']}/s of {t['per_second']:g}/s")
    if cap["limiting"]:
        con.print("[bold yellow]the announce cap is the limit:[/] visits wait for it; more workers would not "
                  "visit faster")


def _plan(con, plan: dict | None) -> None:
    """The caps a plan (every torrent once per revisit interval) needs more of, and the real revisit interval."""
    from rich.markup import escape

    if not plan or plan["enough"]:
        return
    for name, c in plan["caps"].items():
        if not c["enough"]:
            which = "the namespace's cap" if name == "*" else escape(name)
            con.print(f"[bold yellow]{which} is short:[/] the plan needs {c['needed_per_second']:g} requests/s "
                      f"({c['requests_per_visit']:g} per visit), it allows {c['per_second']:g}/s", soft_wrap=True)
    con.print(f"  so the catalogue is really revisited every {_duration(plan['revisit_seconds_really'])}, "
              "not every revisit interval", soft_wrap=True)


def _duration(seconds: float) -> str:
    """``seconds`` as an operator reads it: 45 s, 12 min, 7.5 h, 3.2 days."""
    for unit, size in (("days", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.0f} s"


def _costs(con, c: dict | None) -> None:
    """What the visits cost the sources over the last hour: tracker requests per second by kind, DHT
    lookups, requests per visit and pairs counted per 1,000 requests (per tracker: ``--json``, the page)."""
    if not c:
        return
    p, last = c["per_second"], c["last_minute"]
    by_kind = ", ".join(f"{k} {p[k]:.3g}" for k in p if k != "total")
    per_visit = "-" if c["requests_per_visit"] is None else f"{c['requests_per_visit']:g}"
    per_pair = "-" if c["counted_per_1000_requests"] is None else f"{c['counted_per_1000_requests']:g}"
    con.print(f"[bold]costs[/] over the last {c['window_s'] / 60:.0f} min: {p['total']:.3g} tracker requests/s "
              f"({by_kind}), {c['dht_lookups_per_second']:.3g} DHT lookups/s; last minute "
              f"{last['per_second']['total']:.3g}/s and {last['dht_lookups_per_second']:.3g} lookups/s", soft_wrap=True)
    con.print(f"  {per_visit} tracker requests per visit ({c['visits']} visits), {per_pair} (IP, torrent) pairs "
              "counted per 1,000 requests; per tracker: status --json costs, the operators page", soft_wrap=True)


def _workers_table(con, workers: list[dict]) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not workers:
        con.print("no live workers")
        return
    w = Table(title="workers, by machine")
    cols = ("id", "host", "pid", "concurrency", "auto", "in_flight", "visits", "visits_per_hour", "failing")
    for col in cols:
        w.add_column(col.replace("_", " "))
    # status sorts them by host: a machine's processes together, a line under each machine
    hosts = [str(x.get("host", "")) for x in workers]
    for i, x in enumerate(workers):
        w.add_row(*(escape(terminal(str(x.get(c, "")))) for c in cols),
                  end_section=i + 1 < len(workers) and hosts[i + 1] != hosts[i])
    con.print(w)


def _trackers_table(con, trackers: dict, other: dict | None = None) -> None:
    """The busiest trackers, busiest first (``trackers`` comes in that order), then one row
    summing every other tracker. URLs are third parties' text: shown through ``terminal``."""
    from rich.markup import escape
    from rich.table import Table

    if not trackers:
        return
    tr = Table(title="trackers (busiest first)")
    for col in ("tracker", "answers", "failures", "refusals", "backing off", "learned cap", "peers cut"):
        tr.add_column(col)
    for url, x in trackers.items():
        tr.add_row(escape(terminal(url)), str(x.get("answers")), str(x.get("failures")), str(x.get("refusals", 0)),
                   str(x.get("backing_off")), str(x.get("learned_cap") or ""), str(x.get("peers_cut", 0)))
    if other and other.get("trackers"):
        tr.add_row(f"{other['trackers']} other trackers", str(other["answers"]), str(other["failures"]),
                   str(other["refusals"]), "", "", str(other["peers_cut"]))
    con.print(tr)
    refusing = [(u, x["last_refusal"]) for u, x in trackers.items() if x.get("last_refusal")]
    for url, message in refusing:
        con.print(f"{escape(terminal(url))} last refused: {escape(terminal(message))}")


def _nodes_table(con, redis_report: dict) -> None:
    from rich.table import Table

    title = "redis"
    if redis_report["cluster"]:
        title = f"redis cluster: {redis_report['state']}, {redis_report['slots_ok']} of 16384 slots served"
    t = Table(title=title)
    cols = ("node", "role", "keys", "used_memory_bytes", "ops_per_s", "cpu_s")
    for col in cols:
        t.add_column(col.replace("_", " "))
    for row in redis_report["nodes"]:
        t.add_row(*(str(row.get(c, "")) for c in cols))
    con.print(t)
