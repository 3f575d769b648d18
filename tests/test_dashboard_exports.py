"""``peercrawl stats --format csv`` and ``peercrawl export``: the counters of ``stats --json``, as CSV."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.cli import run
from tests.dashboard_data import HASHES, record_world, stats_json


@pytest.fixture
def world(client, keys, settings, tmp_path):
    return record_world(client, keys, settings, tmp_path)


def stats(env, *args) -> list[tuple]:
    p = run(env, "stats", *args, "--json")
    assert p.returncode == 0, p.stderr
    return [(r["metric"], r["count"]) for r in json.loads(p.stdout)]


def test_stats_formats(world, test_env):
    want = stats(test_env, "cities", "--country", "United States")
    p = run(test_env, "stats", "cities", "--country", "United States", "--format", "csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.reader(io.StringIO(p.stdout)))
    assert rows[0] == ["metric", "count", "country", "city"] and [(m, int(n)) for m, n, *_ in rows[1:]] == want
    # the metric is the exact stat name, the names beside it as GeoIP spells them
    assert rows[1] == ["countries.United States.cities.St%2E Louis.users", "6", "United States", "St. Louis"]
    p = run(test_env, "stats", "countries", "--format", "json")
    assert [(r["metric"], r["count"]) for r in json.loads(p.stdout)] == stats(test_env, "countries")
    p = run(test_env, "stats", "countries", "--format", "table")
    assert p.stdout.splitlines()[0].split() == ["15", "countries.Germany.users"]
    p = run(test_env, "stats", "countries", "--json", "--format", "csv")
    assert p.returncode == 2 and "contradicts" in p.stderr and "Traceback" not in p.stderr


def test_export_writes_every_counter(world, test_env, tmp_path):
    out = tmp_path / "export"
    p = run(test_env, "export", "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr
    written = json.loads(p.stdout)["rows"]
    files = {f.stem: list(csv.DictReader(f.open(encoding="utf-8"))) for f in out.glob("*.csv")}
    assert set(files) == set(written) and all(len(files[k]) == n for k, n in written.items())
    got = {(r["metric"], int(r["count"])) for rows in files.values() for r in rows}
    # every ranking stats can print, for every period, is in the export
    want = set()
    for month in (None, "2026-05", "2026-06"):
        extra = ("--month", month) if month else ()
        for fam in ("countries", "cities", "postcodes", "torrents"):
            want |= set(stats_json(test_env, fam, "--limit", "1000", *extra))
        for h in HASHES:
            for fam in ("countries", "cities", "postcodes"):
                want |= set(stats_json(test_env, fam, "--torrent", h, "--limit", "1000", *extra))
    assert ("countries.Germany.users", 15) in want and len(want) > 100
    # every counter: the unplaced rows (no metric) are differences of counters, not counters of their own
    assert (None, 1) in want
    assert got == {(m, n) for m, n in want if m is not None}
    la = [r for r in files["cities"] if r["metric"] == "countries.United States.cities.St%2E Louis.users"]
    assert la == [{"metric": "countries.United States.cities.St%2E Louis.users", "period": "all",
                   "country": "United States", "city": "St. Louis", "count": "6"}]
    june = [r for r in files["torrent_countries"] if r["period"] == "2026-06" and r["info_hash"] == HASHES[0]]
    assert [(r["country"], r["count"]) for r in june] == [("India", "10")]
    assert june[0]["metric"] == f"torrents.{HASHES[0]}.countries.India.users.2026-06"
