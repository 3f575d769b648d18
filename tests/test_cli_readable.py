"""What a person reads: ``torrent`` and ``status`` as people read them, on a terminal and on a pipe.

No traceback, no Python repr, no raw epoch float; a failed visit says why, and a tracker the
address policy refuses names the setting that allows it.
"""

from __future__ import annotations

import json
import re
import time

from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.report.queue_report import capacity_report
from crawler.torrents.items import NewItem
from tests.cli import on_terminal, run
from tests.opentracker import opentracker, peer_address  # noqa: F401 (fixture)

SGR = re.compile(r"\x1b\[[0-9;]*m")
# what a Python repr or a raw unix time looks like in a line of text
CODE = re.compile(r"\{'|\bNone\b|\bTrue\b|\bFalse\b|\b1[6-9]\d{8}\.\d+")


def both(env: dict, *args: str) -> list[str]:
    """``peercrawl ARGS`` on a pseudo-terminal and on a pipe: the two texts, styles removed."""
    piped = run(env, *args)
    assert piped.returncode == 0, piped.stderr
    assert "Traceback" not in piped.stderr
    return [SGR.sub("", on_terminal(env, *args)), piped.stdout]


def flat(text: str) -> str:
    """The words of ``text`` without table borders or wrapping (a cell may wrap at 80 columns)."""
    return re.sub(r"[\s│┃]+", " ", text)


def column(text: str, n: int) -> str:
    """The words of a table's ``n``-th column (from 0), its wrapped cells joined."""
    return " ".join(x.split("│")[n + 1].strip() for x in text.splitlines() if x.count("│") > n + 1)


def readable(text: str) -> None:
    assert not CODE.search(text), CODE.search(text).group(0) + "\n" + text


def test_torrent_view_of_a_visited_torrent_in_sections(opentracker, test_env):
    h = "1d" * 20
    ot = opentracker([h])
    for i in range(6):
        ot.announce_from(peer_address(i), h, 6881, left=i % 2)
    assert run(test_env, "add", f"magnet:?xt=urn:btih:{h}&dn=Seen+Once&tr={ot.udp_url}").returncode == 0
    assert run(test_env, "worker", "--until-idle", timeout=120).returncode == 0
    for text in both(test_env, "torrent", h):
        readable(text)
        lines = text.splitlines()
        assert lines[0] == "Seen Once"
        for section in ("What it is", "Where it stands", "What its sources said last", "Its swarm",
                        "Its last completed visit"):
            assert any(x.strip() == section for x in lines), section
        assert re.search(r"last visit +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((\d+ s ago|now)\), some", text)
        assert re.search(r"next visit +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in [\d.]+ min\)", text)
        assert re.search(r"udp://127\.0\.0\.1:\d+/announce +│? *announced", text), text
        assert re.search(r"peers last visit +6\b", text)


def test_a_refused_loopback_tracker_says_why_and_names_the_setting(opentracker, test_env):
    """Without PEERCRAWL_ALLOW_PRIVATE, a loopback tracker is refused: the torrent says so, the
    setting is named first in its error, the worker logs it once, and no outage is guessed."""
    env = dict(test_env, PEERCRAWL_ALLOW_PRIVATE="0")
    hashes = [f"{i:02x}" * 20 for i in range(0xa0, 0xa7)]
    ot = opentracker(hashes)
    magnets = [f"magnet:?xt=urn:btih:{h}&tr={ot.udp_url}" for h in hashes]
    assert run(env, "add", *magnets).returncode == 0
    w = run(env, "worker", "--until-idle", "--concurrency", "1", timeout=120)
    assert w.returncode == 0, w.stderr
    events = [json.loads(x) for x in w.stderr.splitlines() if x.startswith("{")]
    refused = [e for e in events if e["event"] == "tracker_refused_by_policy"]
    assert len(refused) == 1 and "PEERCRAWL_ALLOW_PRIVATE=1" in refused[0]["message"]
    assert not [e for e in events if e["event"] == "network_outage"], "7 refused visits are no outage"
    (stopped,) = [e for e in events if e["event"] == "worker_stopped"]
    assert (stopped["visits"], stopped["failed"]) == (7, 7)  # as `run`'s summary counts them
    info = json.loads(run(env, "torrent", hashes[0], "--json").stdout)
    assert info["last_error"].startswith(f"{ot.udp_url}: tracker udp://127.0.0.1:{ot.port} resolves to "
                                         "127.0.0.1, a loopback address; set PEERCRAWL_ALLOW_PRIVATE=1")
    assert info["last_visit_sources"]["trackers"] == {
        ot.udp_url: "refused by the address policy (a private or local address)"}
    for text in both(env, "torrent", hashes[0]):
        readable(text)
        assert re.search(r"refused by the address policy \(a private or local address\); "
                         r"PEERCRAWL_ALLOW_PRIVATE=1 allows it", column(text, 1)), text


def test_torrent_view_of_a_quarantined_torrent_says_why_and_how_back(client, namespace, settings, test_env):
    q = Queue(client, Keys(namespace), settings.replace(quarantine_after=1, lease_seconds=10))
    h = "4e" * 20
    q.add([NewItem(h)], now=100.0)
    (lease,) = q.claim(1, now=100.0)
    q.housekeep(now=100.0 + 11)
    for text in both(test_env, "torrent", h):
        readable(text)
        assert re.search(r"state +quarantined", text)
        assert "lease expired 1 time in a row" in flat(text) and "add --readmit HASH returns it" in flat(text)


def test_workers_needed_is_the_plan_over_a_busy_pool_or_says_why_not():
    report = {"tracked": 6, "visits_last_hour": 12, "rates": {"visit_round_trip_s": {"p50": 0.5}}}
    idle = [{"id": "a", "concurrency": 10, "in_flight": 0, "visits_per_hour": 6.0},
            {"id": "b", "concurrency": 10, "in_flight": 0, "visits_per_hour": 6.0}]
    cap = capacity_report(report, idle, 1800.0)["capacity"]
    # idle workers' rate is what 6 torrents leave them: the pool's speed counts, 72,000 visits/h each
    assert cap["visits_per_worker_hour"] == 72_000 and cap["workers_needed"] == 1
    assert cap["per_worker_basis"] == "pool" and "6 torrents every 1800 s" in cap["workers_needed_why"]
    # at 200 s of CPU for 1,000 visits each (0.2 s a visit), one core does 18,000 an hour: less than the pool
    dear = [dict(w, cpu_s=200.0, visits=1000) for w in idle]
    cap = capacity_report(report, dear, 1800.0)["capacity"]
    assert (cap["per_worker_basis"], cap["visits_per_worker_hour"]) == ("core", 18_000)
    busy = [dict(w, in_flight=10, visits_per_hour=100.0) for w in idle]
    cap = capacity_report(dict(report, tracked=600), busy, 1800.0)["capacity"]
    assert (cap["per_worker_basis"], cap["workers_needed"]) == ("measured", 12)
    cap = capacity_report({"tracked": 6, "visits_last_hour": 0}, [{"id": "a"}], 1800.0)["capacity"]
    assert cap["workers_needed"] is None and cap["workers_needed_why"].startswith("no visit timed")
    # visits timed, but no worker running (a crawl run for a while, then stopped): no pool to speak of,
    # not the largest pool auto may grow to over a loopback round trip
    for gone in ({"tracked": 6, "visits_last_hour": 0}, dict(report, rates={"visit_round_trip_s": {"p50": 0.012}})):
        cap = capacity_report(gone, [], 1800.0, concurrency=500)["capacity"]
        assert cap["visits_per_worker_hour"] is None and cap["workers_needed"] is None
        assert cap["workers_needed_why"].startswith("no worker is running")


def test_status_reads_without_code(client, namespace, settings, test_env):
    q = Queue(client, Keys(namespace), settings)
    q.add([NewItem("5f" * 20, ("udp://tracker.example:1337/" + "x" * 120,))], now=time.time())
    for text in both(test_env, "status"):
        readable(text)
        assert re.search(r"workers needed +│ +— \(no worker is running", text), text
        assert re.search(r"claim serve rate \(1 h\) +│ +— \(no claim\)", text), text


def test_reshard_export_secret_and_flush_speak_in_sentences(test_env, tmp_path):
    assert run(test_env, "add", "2e" * 20).returncode == 0
    moved = run(test_env, "reshard", "--shards", "2")
    assert moved.returncode == 0 and moved.stdout == "moved 1 torrent: 1 → 2 shards\n", moved
    back = run(test_env, "reshard", "--shards", "1")
    assert back.stdout == "moved 1 torrent: 2 → 1 shard\n", back
    exported = run(test_env, "export", "--out", str(tmp_path / "csv"))
    lines = exported.stdout.splitlines()
    assert lines[0].split() == ["rows", "file"] and len(lines) == 8, exported.stdout
    assert all(line.split()[0] == "0" and line.endswith(".csv") for line in lines[1:])
    for text in (exported.stdout, run(test_env, "secret").stdout, run(test_env, "flush").stdout):
        readable(text)
        assert text.strip() and "Traceback" not in text


def test_a_pool_size_out_of_bounds_is_one_line_naming_the_option_or_the_setting(test_env):
    for args, env, names in ((["--concurrency", "0"], {}, "--concurrency"),
                             (["--concurrency", "many"], {}, "--concurrency"),
                             ([], {"PEERCRAWL_CONCURRENCY": "20000"}, "PEERCRAWL_CONCURRENCY")):
        p = run(dict(test_env, **env), "worker", "--until-idle", *args, timeout=60)
        lines = [x for x in p.stderr.splitlines() if x.strip()]
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
        assert any(names in x and "1 to 10000" in x for x in lines), p.stderr
