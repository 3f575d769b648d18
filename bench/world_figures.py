"""bench_world's figures: what happened between two marks, per tracker and per part, and the targets.

A mark (bench_world.Mark) holds the taps' counts, the opentrackers' own, each
torrent's visits and the DHT swarm's ``get_peers`` received; the worker's
counts come as a ``Tally`` of its request-count minutes over the same span.
"""

from __future__ import annotations

# What a tracker is sent, by face, as the taps and the worker count it.
KINDS = {"udp": ("connect", "scrape", "announce", "withdrawal"), "http": ("scrape", "announce", "withdrawal")}
# The targets the figures are read against.
FULL_DUE = 74  # torrents naming a tracker due within one revisit interval
FULL_HASHES = 50  # hashes per UDP scrape packet there
EMPTY_COST = 0.05  # tracker requests per empty-swarm visit per tracker named


def _delta(b: dict, a: dict) -> dict:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}


def _ratio(x: float, y: float, digits: int = 3) -> float | None:
    return round(x / y, digits) if y else None


def face_figures(face: str, outside: dict | None, worker: dict) -> dict:
    """One face's requests, outside (None: nothing listens to count them) and as the worker counted them."""
    kinds = KINDS[face]
    out: dict = {"worker": {k: worker.get(k, 0) for k in kinds}}
    if outside is not None:
        out["outside"] = {k: outside.get(k, 0) for k in kinds}
        out["outside"]["scrape_hashes"] = outside.get("scrape_hashes", 0)
        out["hashes_per_scrape"] = _ratio(outside.get("scrape_hashes", 0), outside.get("scrape", 0), 1)
        differ = {k: [out["outside"][k], out["worker"][k]] for k in kinds if out["outside"][k] != out["worker"][k]}
        if differ:
            out["differ_outside_worker"] = differ
        extra = {k: v for k, v in outside.items() if k.startswith("reply_3") or k in ("failed", "reply_lost", "other")}
        if any(extra.values()):
            out["outside_other"] = extra
    return out


def server_figures(s, a, b, tally, visits: dict[str, int], naming: list, seconds: float, empty: set[str]) -> dict:
    """One tracker between marks ``a`` and ``b`` (module note); ``naming``: the torrents naming it."""
    naming_visits = sum(visits[t.info_hash] for t in naming)
    empty_visits = sum(visits[t.info_hash] for t in naming if t.info_hash in empty)
    out: dict = {"kind": s.kind, "urls": [s.urls[f] for f in s.faces], "torrents_naming": len(naming),
                 "visits_naming": naming_visits}
    tapped = s.name in b.taps
    outside_total = worker_total = 0
    for face in s.faces:
        o = _delta(b.taps[s.name][face], a.taps[s.name][face]) if tapped else None
        f = face_figures(face, o, tally.trackers.get(s.urls[face], {}))
        f["torrents_naming"] = sum((s.name, face) in t.endpoints for t in naming)
        out[face] = f
        worker_total += sum(f["worker"].values())
        outside_total += sum(f["outside"][k] for k in KINDS[face]) if tapped else sum(f["worker"].values())
    if s.name in b.ots:
        out["opentracker_counted"] = _delta(b.ots[s.name], a.ots[s.name])
    out.update(requests_outside=outside_total if tapped else None, requests_worker=worker_total,
               requests_per_visit=_ratio(outside_total, naming_visits),
               requests_per_minute=round(outside_total * 60 / seconds, 1) if seconds else None)
    # what the empty swarms' visits cost it: the hashes' shares, connects by the same share (by the
    # visits' share where nothing carried a hash: a tracker that never answered a connect)
    if tapped:
        costs = _delta(b.taps[s.name]["hashes"], a.taps[s.name]["hashes"])
        total = sum(costs.values())
        mine = sum(v for h, v in costs.items() if h in empty)
        connects = out.get("udp", {}).get("outside", {}).get("connect", 0)
        share = mine / total if total else (empty_visits / naming_visits if naming_visits else 0.0)
        out["empty_cost"] = mine + connects * share
    else:
        out["empty_cost"] = outside_total * empty_visits / naming_visits if naming_visits else 0.0
    out["empty_cost"] = round(out["empty_cost"], 3)
    return out


def truth_figures(world, counts: dict[str, int]) -> dict:
    """Unique IPs counted per torrent against the truth, by kind of torrent."""
    out: dict = {"torrents_exact": 0, "torrents_under": 0, "torrents_over": 0, "pairs_truth": 0, "pairs_counted": 0}
    by_kind: dict[str, dict] = {}
    short = []
    for t in world.torrents:
        truth, got = len(t.truth(world.swarm.ips)), counts.get(t.info_hash, 0)
        k = by_kind.setdefault(t.kind, {"torrents": 0, "exact": 0, "pairs_truth": 0, "pairs_counted": 0})
        k["torrents"] += 1
        k["exact"] += got == truth
        k["pairs_truth"] += truth
        k["pairs_counted"] += got
        out["pairs_truth"] += truth
        out["pairs_counted"] += got
        key = "torrents_exact" if got == truth else ("torrents_under" if got < truth else "torrents_over")
        out[key] += 1
        if got != truth and len(short) < 5:
            short.append({"torrent": t.info_hash[:12], "kind": t.kind, "truth": truth, "counted": got,
                          "on": sorted(t.peers)})
    out["by_kind"] = by_kind
    out["equal_truth"] = out["torrents_exact"] == len(world.torrents)
    if short:
        out["some_not_exact"] = short
    return out


def part_figures(world, a, b, tally, counts: dict[str, int]) -> dict:
    """One part (first pass or steady) between marks ``a`` and ``b``."""
    seconds = b.t - a.t
    visits = {h: b.visits[h] - a.visits.get(h, 0) for h in b.visits}
    total_visits = sum(visits.values())
    empty = {t.info_hash for t in world.torrents if t.kind == "empty"}
    trackers = {}
    for s in world.servers:
        naming = [t for t in world.torrents if any(name == s.name for name, _ in t.endpoints)]
        trackers[s.name] = server_figures(s, a, b, tally, visits, naming, seconds, empty)
    udp = [f["udp"]["outside"] for f in trackers.values() if "outside" in f.get("udp", {})]
    http = [f["http"]["outside"] for f in trackers.values() if "outside" in f.get("http", {})]
    outside = sum(f["requests_outside"] if f["requests_outside"] is not None else f["requests_worker"]
                  for f in trackers.values())
    by_host = {}
    for s in world.servers:
        for u in s.urls.values():
            by_host[u] = u.split("://", 1)[1].rsplit("/", 1)[0]
    empty_visits = [(t, visits[t.info_hash]) for t in world.torrents if t.info_hash in empty]
    per_url = sum(n * len(t.endpoints) for t, n in empty_visits)
    per_host = sum(n * len({by_host[u] for u in world.url_list(t)}) for t, n in empty_visits)
    empty_cost = sum(f["empty_cost"] for f in trackers.values())
    summary = {
        "udp_hashes_per_scrape_packet": _ratio(sum(o["scrape_hashes"] for o in udp), sum(o["scrape"] for o in udp), 1),
        "http_hashes_per_scrape": _ratio(sum(o["scrape_hashes"] for o in http), sum(o["scrape"] for o in http), 1),
        "tracker_requests": outside,
        "tracker_requests_worker": tally.requests,
        "tracker_requests_per_visit": _ratio(outside, total_visits),
        "tracker_requests_per_minute": round(outside * 60 / seconds, 1) if seconds else None,
        "empty_swarm_visits": sum(n for _, n in empty_visits),
        "empty_swarm_requests_per_visit_per_url_named": _ratio(empty_cost, per_url, 4),
        "empty_swarm_requests_per_visit_per_host_named": _ratio(empty_cost, per_host, 4),
        "dht_lookups_per_visit": _ratio(tally.totals.get("dht", 0), total_visits),
        "dht_get_peers_received_per_visit": _ratio(b.get_peers - a.get_peers, total_visits, 2),
        "dht_scrapes_per_visit": _ratio(tally.totals.get("dht_scrapes", 0), total_visits),
        "dht_scrape_queries_per_visit": _ratio(tally.totals.get("dht_scrape_queries", 0), total_visits, 2),
        "worker_counted_pairs": tally.totals.get("counted", 0),
    }
    if tally.others:
        summary["worker_requests_without_own_field"] = tally.others
    return {"seconds": round(seconds, 1), "visits": total_visits, "visits_per_s": _ratio(total_visits, seconds, 2),
            "summary": summary, "truth": truth_figures(world, counts), "trackers": trackers}


def targets(out: dict) -> dict:
    """Each part's figures beside the targets."""
    res = {}
    for part in ("first_pass", "steady"):
        p = out.get(part)
        if not p:
            continue
        due = {n: f for n, f in p["trackers"].items() if "outside" in f.get("udp", {})
               and f["udp"]["torrents_naming"] >= FULL_DUE and f["udp"]["outside"]["scrape"]}
        fills = {n: f["udp"]["hashes_per_scrape"] for n, f in due.items()}
        res[part] = {
            "udp_trackers_with_74_due": len(due),
            "udp_hashes_per_scrape_packet_there": fills,
            "udp_hashes_per_scrape_packet_there_min": min(fills.values()) if fills else None,
            "udp_trackers_there_at_50_or_more": sum(v is not None and v >= FULL_HASHES for v in fills.values()),
            "empty_swarm_requests_per_visit_per_url_named": p["summary"]["empty_swarm_requests_per_visit_per_url_named"],
            "empty_swarm_target_met": (p["summary"]["empty_swarm_requests_per_visit_per_url_named"] or 0) <= EMPTY_COST,
            "counts_equal_truth": p["truth"]["equal_truth"],
            "torrents_not_exact": p["truth"]["torrents_under"] + p["truth"]["torrents_over"],
        }
    return res
