"""Third-party place names as ``peercrawl export`` and ``peercrawl stats`` show them: stored as
they came, no cell a spreadsheet evaluates, no control character on a terminal, no markup.

The commands run for real in subprocesses (``tests/cli.py``); those that print to a terminal
run on a pseudo-terminal, as a user's would (click keeps styles only on a terminal).
"""

from __future__ import annotations

import calendar
import csv
import json
import os
import re

import pytest

import geo
from crawler.counters import Recorder, escape, top
from crawler.safe_text import FORMULA_START
from tests.cli import on_terminal, run
from tests.mmdb import write_city_db

H = "ab" * 20
T0 = calendar.timegm((2024, 5, 10, 12, 0, 0))

FORMULA_CITY = '=HYPERLINK("http://evil.example/","x")'
FORMULA_POSTCODE = "-2+3+cmd|' /C calc'!A0"
FORMULA_COUNTRY = "@SUM(1+1)"
OSC_CITY = "\x1b]0;pwned\x07"  # sets a terminal's title
CSI_CITY = "Red\x1b[31mTown\x9b2J"  # recolours; C1 CSI clears the screen
BIDI_CITY = "abc\u202egnp.exe"  # reads backwards
MARKUP_CITY = "[link=http://evil.example]x[/link][blink]"

NETS = {
    "1.1.1.0/24": ("Germany", FORMULA_CITY, FORMULA_POSTCODE),
    "1.1.2.0/24": ("Germany", OSC_CITY, "+4930"),
    "1.1.3.0/24": ("Germany", CSI_CITY, None),
    "1.1.4.0/24": ("Germany", BIDI_CITY, None),
    "1.1.5.0/24": ("Germany", MARKUP_CITY, None),
    "2.2.2.0/24": (FORMULA_COUNTRY, "Town", "=1+1"),
}
UNSHOWABLE = ("\x1b", "\x07", "\x9b", "\u202e")


@pytest.fixture
def recorded(client, keys, settings, tmp_path):
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "hostile.mmdb", NETS)))
    rec.record_visit(H, ["1.1.1.1", "1.1.2.1", "1.1.3.1", "1.1.4.1", "1.1.5.1", "2.2.2.2"], T0)
    # stored as they came: the names are the counts' keys
    cities = {r["metric"] for r in top(client, keys, "cities", country="Germany", limit=100)}
    assert f"countries.Germany.cities.{OSC_CITY}.users" in cities
    return rec


def rows_of(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_export_writes_no_cell_a_spreadsheet_evaluates(recorded, test_env, tmp_path):
    out = tmp_path / "export"
    r = run(test_env, "export", "--out", str(out))
    assert r.returncode == 0, r.stderr
    cities = rows_of(out / "cities.csv")
    assert cities[0] == ["metric", "period", "country", "city", "count"]
    assert ["'" + FORMULA_CITY] in [row[3:4] for row in cities]
    postcodes = [row[3] for row in rows_of(out / "postcodes.csv")]
    assert "'" + FORMULA_POSTCODE in postcodes and "'+4930" in postcodes and "'=1+1" in postcodes
    assert "'" + FORMULA_COUNTRY in [row[2] for row in rows_of(out / "countries.csv")]
    torrent_cities = rows_of(out / "torrent_cities.csv")
    assert ["'" + FORMULA_COUNTRY, "Town"] in [row[3:5] for row in torrent_cities]
    assert ["Germany", "'" + FORMULA_CITY] in [row[3:5] for row in torrent_cities]
    for name in os.listdir(out):
        for row in rows_of(out / name):
            for cell in row:
                assert not cell.startswith(FORMULA_START), (name, row)
    # the other names are written exactly as stored (a file is not a terminal)
    assert OSC_CITY in [row[3] for row in cities]


def test_export_listing_prints_no_control_character(recorded, test_env, tmp_path):
    out = tmp_path / "out\x1b]0;pwned\x07"
    shown = on_terminal(test_env, "export", "--out", str(out))
    assert "cities.csv" in shown and "out?]0;pwned?" in shown
    assert not any(c in shown for c in UNSHOWABLE), repr(shown)


def test_stats_table_on_a_terminal_shows_names_harmless_and_markup_literally(recorded, test_env):
    shown = on_terminal(test_env, "stats", "cities", "--country", "Germany")
    assert not any(c in shown for c in UNSHOWABLE), repr(shown)
    assert "countries.Germany.cities.?]0;pwned?.users" in shown
    assert "countries.Germany.cities.Red?[31mTown?2J.users" in shown
    assert "countries.Germany.cities.abc?gnp.exe.users" in shown  # names as GeoIP spells them
    assert f"countries.Germany.cities.{MARKUP_CITY}.users" in shown  # no markup: printed as it is
    assert f"countries.Germany.cities.{FORMULA_CITY}.users" in shown
    piped = run(test_env, "stats", "cities", "--country", "Germany")  # the same when piped
    assert piped.returncode == 0 and not any(c in piped.stdout for c in UNSHOWABLE), repr(piped.stdout)


def test_stats_csv_cells_are_harmless_on_a_terminal_and_exact_in_a_file(recorded, test_env):
    shown = on_terminal(test_env, "stats", "cities", "--format", "csv")
    assert not any(c in shown for c in UNSHOWABLE), repr(shown)
    assert "countries.Germany.cities.?]0;pwned?.users,1,Germany,?]0;pwned?" in shown.splitlines()
    piped = run(test_env, "stats", "postcodes", "--format", "csv")
    assert piped.returncode == 0, piped.stderr
    rows = list(csv.reader(piped.stdout.splitlines()))
    assert rows[0] == ["metric", "count", "country", "postcode"] and len(rows) == 5
    assert rows[-1] == ["", "3", "", "unplaced"]  # the peers in no postcode
    for metric, count, *_ in rows[1:-1]:
        assert metric.startswith("countries.") and int(count) == 1
    assert [f"countries.Germany.postcodes.{FORMULA_POSTCODE}.users", "1", "Germany", "'" + FORMULA_POSTCODE] in rows
    file_rows = list(csv.reader(run(test_env, "stats", "cities", "--format", "csv").stdout.splitlines()))
    assert [f"countries.Germany.cities.{OSC_CITY}.users", "1", "Germany", OSC_CITY] in file_rows  # exact when not shown


def test_stats_json_escapes_every_control_character_and_keeps_names_exact(recorded, test_env):
    shown = on_terminal(test_env, "stats", "cities", "--country", "Germany", "--json")
    assert not any(c in shown for c in UNSHOWABLE), repr(shown)
    assert "\\u001b]0;pwned\\u0007" in shown and "\\u009b" in shown and "\\u202e" in shown
    metrics = {r["metric"] for r in json.loads(shown)}
    for city in (OSC_CITY, CSI_CITY, MARKUP_CITY, FORMULA_CITY):
        assert f"countries.Germany.cities.{escape(city)}.users" in metrics
    assert "countries.Germany.cities.abc\u202egnp%2Eexe.users" in metrics


def test_torrent_prints_a_visit_error_without_its_control_characters(client, keys, settings, test_env):
    from crawler.queue.queue import Queue
    from crawler.torrents.items import parse_item

    q = Queue(client, keys, settings)
    q.add([parse_item(H)])
    (lease,) = q.claim(1)
    assert q.fail(lease, error="tracker said \x1b]0;pwned\x07 \x9b2J \u202eabc")
    shown = on_terminal(test_env, "torrent", H)
    assert "tracker said ?]0;pwned? ?2J ?abc" in shown
    # the view's own styles (bold, italic titles) are the only escapes on the terminal
    assert not any(c in re.sub(r"\x1b\[[0-9;]*m", "", shown) for c in UNSHOWABLE), repr(shown)
    r = run(test_env, "torrent", H, "--json")  # JSON escapes every non-ASCII character itself
    assert r.returncode == 0 and not any(c in r.stdout for c in UNSHOWABLE), repr(r.stdout)
    assert json.loads(r.stdout)["last_error"] == "tracker said \x1b]0;pwned\x07 \x9b2J \u202eabc"
