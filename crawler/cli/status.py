"""``peercrawl status``: the queue's health for operators (contract §7)."""

from __future__ import annotations

import json
import time

import click

from crawler.cli import human
from crawler.cli.context import open_context
from crawler.queue.queue import Queue
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

    con = Console(highlight=False)
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
                 "failed_visits_last_hour"):
        t.add_row(name.replace("_", " "), human.value(r.get(name)))
    latency = r.get("queue_latency_s")
    t.add_row("queue latency", human.NONE if latency is None else human.duration(latency))
    _capacity_rows(t, r.get("capacity") or {})
    rates = r.get("rates") or {}
    if rates:
        pct = human.percent
        rt = rates["visit_round_trip_s"]
        t.add_row("claim serve rate (1 h)", human.NONE + " (no claim)" if not rates["claims_asked"] else
                  f"{pct(rates['claim_serve_rate'])} of {rates['claims_asked']:,} asked")
        t.add_row("reclaim rate (1 h)", human.NONE + " (no lease served)" if rates["reclaim_rate"] is None else
                  f"{pct(rates['reclaim_rate'])}: {rates['leases_reclaimed']:,} leases expired")
        t.add_row("visit round trip (1 h)", human.NONE if not rt["visits"] else
                  f"median {_ms(rt['p50'])}, p95 {_ms(rt['p95'])} over {rt['visits']:,} visits")
        cov = r.get("coverage") or {}
        if cov:
            t.add_row("coverage (1 h)", human.NONE if cov["coverage"] is None else
                      f"{pct(cov['coverage'])}: {cov['counted']:,} IPs counted of {cov['reported']:,} reported")
    shards = r.get("shards") or {}
    t.add_row("shards", f"{shards.get('queue')} queue, {shards.get('counters')} counters")
    marks = r.get("marks") or {}
    if marks:
        t.add_row("mark buckets", f"{marks['buckets']:,}, ~{marks['records_per_bucket']:,.0f} records each "
                                  f"(of {marks['sampled']} read)")
    con.print(t)


def _ms(seconds: float | None) -> str:
    return human.NONE if seconds is None else f"{seconds * 1000:.0f} ms" if seconds < 2 else human.duration(seconds)


def _capacity_rows(t, cap: dict) -> None:
    """What the plan needs and how many workers that takes, each with its basis or why it is unknown."""
    if not cap:
        return
    needed = cap.get("visits_needed_per_hour")
    t.add_row("visits needed per hour", human.NONE + " (revisit interval 0)" if needed is None else f"{needed:,.0f}")
    per = cap.get("visits_per_worker_hour")
    bases: dict[str | None, str] = {"measured": "measured while busy", "pool": "its pool over the median visit time",
                                    "core": "one core at its CPU time per visit"}
    basis = bases.get(cap.get("per_worker_basis"), "measured")
    t.add_row("visits per worker hour", human.NONE if per is None else f"{per:,.0f} ({basis})")
    n, why = cap.get("workers_needed"), cap.get("workers_needed_why")
    t.add_row("workers needed", (human.NONE if n is None else f"{n:,}") + (f" ({why})" if why else ""))
    if cap.get("limited_by"):
        t.add_row("limited by", str(cap["limited_by"]))


def _warnings(con, r: dict) -> None:
    """Quarantined torrents, Redis eviction, crowded mark buckets, an outage, GeoIP read errors: each when there
    is one."""
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
    if (r.get("marks") or {}).get("warning"):
        con.print(f"[bold yellow]mark buckets:[/] {r['marks']['warning']}", soft_wrap=True)
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
    con.print(f"  so the catalogue is really revisited every {human.duration(plan['revisit_seconds_really'])}, "
              "not every revisit interval", soft_wrap=True)


def _costs(con, c: dict | None) -> None:
    """What the visits cost the sources over the last hour: tracker requests per second by kind, DHT
    lookups, requests per visit and pairs counted per 1,000 requests (per tracker: ``--json``, the page)."""
    if not c:
        return
    p, last = c["per_second"], c["last_minute"]
    by_kind = ", ".join(f"{k} {p[k]:.3g}" for k in p if k != "total")
    per_visit = human.NONE if c["requests_per_visit"] is None else f"{c['requests_per_visit']:g}"
    per_pair = human.NONE if c["counted_per_1000_requests"] is None else f"{c['counted_per_1000_requests']:g}"
    con.print(f"[bold]costs[/] over the last {c['window_s'] / 60:.0f} min: {p['total']:.3g} tracker requests/s "
              f"({by_kind}), {c['dht_lookups_per_second']:.3g} DHT lookups/s; last minute "
              f"{last['per_second']['total']:.3g}/s and {last['dht_lookups_per_second']:.3g} lookups/s", soft_wrap=True)
    con.print(f"  {per_visit} tracker requests per visit ({c['visits']} visits), {per_pair} (IP, torrent) pairs "
              "counted per 1,000 requests; per tracker: status --json costs, the operators page", soft_wrap=True)


def _workers_table(con, workers: list[dict]) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    if not workers:
        con.print("no live workers")
        return
    w = Table(title="workers, by machine", box=box.SIMPLE_HEAD)
    w.add_column("worker", no_wrap=True)
    for col in ("pool", "in flight", "visits", "per hour", "every visit failing"):
        w.add_column(col, justify="right")
    # status sorts them by host: a machine's processes together, a line under each machine
    hosts = [str(x.get("host", "")) for x in workers]
    for i, x in enumerate(workers):
        pool = human.value(x.get("concurrency")) + (" (auto)" if x.get("auto") else "")
        rate = x.get("visits_per_hour")
        w.add_row(escape(terminal(str(x.get("id", "")))), pool, human.value(x.get("in_flight")),
                  human.value(x.get("visits")), human.NONE if rate is None else f"{rate:,.0f}",
                  "yes" if x.get("failing") else "no",
                  end_section=i + 1 < len(workers) and hosts[i + 1] != hosts[i])
    con.print(w)


def _trackers_table(con, trackers: dict, other: dict | None = None) -> None:
    """The busiest trackers, busiest first (``trackers`` comes in that order), then one row
    summing every other tracker. URLs are third parties' text: shown through ``terminal``."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    if not trackers:
        return
    tr = Table(title="trackers (busiest first)", box=box.SIMPLE_HEAD, padding=(0, 1))
    tr.add_column("tracker", no_wrap=True)
    for col in ("answers", "failed", "refused"):
        tr.add_column(col, justify="right", no_wrap=True)
    tr.add_column("now", no_wrap=True)
    # what the other columns take (figures, a space either side, a separator)
    width = max(24, con.width - 46)
    for url, x in trackers.items():
        tr.add_row(escape(terminal(human.url(url, width))), human.value(x.get("answers")),
                   human.value(x.get("failures")), human.value(x.get("refusals", 0)), _tracker_now(x))
    if other and other.get("trackers"):
        tr.add_row(f"{other['trackers']:,} other trackers", human.value(other["answers"]),
                   human.value(other["failures"]), human.value(other["refusals"]),
                   f"{other['peers_cut']:,} peers cut" if other["peers_cut"] else "")
    con.print(tr)
    # why a tracker is not answering: the address policy, its own refusals, its failures
    for url, x in trackers.items():
        for what, field, shown in (("refused by the address policy", "last_blocked", x.get("blocked")),
                                   ("refuses", "last_refusal", x.get("refusals")),
                                   ("failing", "last_failure", x.get("failing") or x.get("backing_off"))):
            if shown and x.get(field):
                con.print(f"[bold yellow]{escape(terminal(url))} {what}:[/] {escape(terminal(x[field]))}",
                          soft_wrap=True)


def _tracker_now(x: dict) -> str:
    """A tracker's standing in a few words: backing off, the peers cap it showed, peers it cut."""
    parts = ["backing off"] if x.get("backing_off") else []
    if x.get("learned_cap"):
        parts.append(f"gives {x['learned_cap']} at most")
    if x.get("peers_cut"):
        parts.append(f"{x['peers_cut']:,} peers cut")
    return ", ".join(parts) or human.NONE


def _nodes_table(con, redis_report: dict) -> None:
    from rich.table import Table

    title = "redis"
    if redis_report["cluster"]:
        title = f"redis cluster: {redis_report['state']}, {redis_report['slots_ok']} of 16384 slots served"
    t = Table(title=title)
    for col in ("node", "role", "keys", "memory", "ops/s", "CPU"):
        t.add_column(col, justify="left" if col in ("node", "role") else "right")
    for row in redis_report["nodes"]:
        cpu = row.get("cpu_s")
        t.add_row(str(row.get("node", "")), str(row.get("role", "")), human.value(row.get("keys")),
                  human.size(row.get("used_memory_bytes")), human.value(row.get("ops_per_s")),
                  human.NONE if cpu is None else human.duration(cpu))
    con.print(t)
