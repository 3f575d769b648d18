"""The dashboard's routes: page shells, their JSON and CSV, ``/metrics`` (contract §10).

Pages are HTML shells (``templates/``) whose script (``static/dashboard.js``)
polls ``/api/...`` and redraws; every ``/api`` view answers CSV of one of its
tables with ``?format=csv&table=NAME``. Nothing here writes to Redis.

Access: with a token (``PEERCRAWL_DASHBOARD_TOKEN``) every request must
carry it as ``?token=`` (answered by a redirect that sets an HttpOnly
cookie), as that cookie, or as ``Authorization: Bearer``; without one only
this machine is served (``crawler.dashboard.access``: the connection's peer
address decides, never a header). The Content Security Policy allows
scripts, styles and data only from this origin: the page cannot load
anything from a CDN even by mistake.

Errors: every error answer (400, 401, 403, 404, 405, 500...) is
``text/plain``, or JSON for the views' own 404 and 503, never HTML: a
message that quotes the address (``month: not a YYYY-MM month: '<form…'``)
cannot become markup in a browser.
"""

from __future__ import annotations

import csv
import hmac
import io
import time
from typing import NoReturn
from urllib.parse import urlencode

import redis
from flask import Flask, Response, abort, jsonify, redirect, render_template, request
from flask.json.provider import DefaultJSONProvider
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from crawler import logs
from crawler.counters.names import check_month, info_hash_hex
from crawler.dashboard import access
from crawler.dashboard.collector import registry_for
from crawler.dashboard.views import Views
from crawler.errors import StoreError
from crawler.safe_text import csv_row

log = logs.get("dashboard")

COOKIE = "peercrawl_token"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
TEXT = "text/plain; charset=utf-8"


def create_app(views: Views, token: str | None = None) -> Flask:
    """The WSGI app over ``views``; ``token``: required on every request when set.

    Without a token only connections from a loopback peer address that name
    ``localhost`` or a loopback address as ``Host`` are answered
    (``crawler.dashboard.access``); the others get 403.
    """
    app = Flask(__name__, static_folder="static", template_folder="templates")
    assert isinstance(app.json, DefaultJSONProvider)  # Flask's own, which has these settings
    app.json.sort_keys = False
    app.json.ensure_ascii = False
    app.before_request(lambda: _check_access(token))
    app.after_request(_headers)
    app.register_error_handler(StoreError, _store_error)
    app.register_error_handler(redis.RedisError, _store_error)  # a read that does not wrap its errors
    app.register_error_handler(HTTPException, _http_error)
    _pages(app)
    _data(app, views)
    return app


def _check_access(token: str | None) -> BaseResponse | None:
    """None to serve the request; a redirect that moves ``?token=`` into a cookie; else 401/403."""
    if token is None:
        why = access.refusal(request.environ.get("REMOTE_ADDR"), request.environ.get("HTTP_HOST"))
        if why is not None:
            _fail(403, why)
        return None
    given = request.args.get("token")
    if given is not None:
        if not hmac.compare_digest(given.encode(), token.encode()):
            abort(401)
        # The token leaves the address bar and history: a cookie carries it from now on.
        args = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
        target = request.path + ("?" + urlencode(args) if args else "")
        resp = redirect(target, code=303)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return resp
    header = request.headers.get("Authorization", "")
    for candidate in (request.cookies.get(COOKIE), header[7:] if header.startswith("Bearer ") else None):
        if candidate is not None and hmac.compare_digest(candidate.encode(), token.encode()):
            return None
    abort(401)


def _headers(resp: Response) -> Response:
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    if request.path.startswith("/api/"):
        resp.headers["Cache-Control"] = "no-store"
    return resp


def _store_error(e: Exception):
    msg = str(e) if isinstance(e, StoreError) else f"Redis is not answering: {e}"
    log.warning("dashboard_store_error", error=msg)
    return jsonify({"error": msg}), 503


def _fail(code: int, text: str) -> NoReturn:
    """Answer the request with ``code`` and ``text`` (shown as plain text by ``_http_error``)."""
    abort(code, description=text)


def _http_error(e: HTTPException) -> Response:
    """Every HTTP error as one line of plain text: ours (``_fail``) say what was wrong, werkzeug's
    (404, 405, 500...) their fixed description; no HTML page, whatever the address held."""
    if e.code == 401:
        return Response("a token is required: open the address with ?token=PEERCRAWL_DASHBOARD_TOKEN\n", 401,
                        {"Content-Type": TEXT, "WWW-Authenticate": "Bearer"})
    headers = [(k, v) for k, v in e.get_headers() if k.lower() != "content-type"]  # keeps 405's Allow
    text = " ".join(str(e.description or e.name).split())
    return Response(f"{e.code} {e.name}: {text}\n", e.code, [*headers, ("Content-Type", TEXT)])


def _pages(app: Flask) -> None:
    """The HTML shells: each names its page; its script fetches the data."""

    @app.get("/")
    def landing():
        return render_template("page.html", page="overview", title="Users by country", arg="")

    @app.get("/months")
    def months_page():
        return render_template("page.html", page="months", title="Users per month", arg="")

    @app.get("/country/<path:name>")
    def country_page(name: str):
        return render_template("page.html", page="country", title=name, arg=name)

    @app.get("/torrent/<hash_>")
    def torrent_page(hash_: str):
        return render_template("page.html", page="torrent", title=_hash(hash_), arg=_hash(hash_))

    @app.get("/operators")
    def operators_page():
        return render_template("page.html", page="operators", title="Operators", arg="")

    @app.get("/favicon.ico")
    def favicon():
        return Response(status=204)


def _data(app: Flask, views: Views) -> None:
    """The JSON (and CSV) views, ``/metrics`` and ``/healthz``."""
    registry = registry_for(views)

    @app.get("/api/overview")
    def api_overview():
        return _answer(views.overview(_month(), _limit()))

    @app.get("/api/months")
    def api_months():
        return _answer(views.months_by_country(_limit(default=10, most=50)))

    @app.get("/api/country/<path:name>")
    def api_country(name: str):
        if not name.strip():
            abort(404)
        return _answer(views.country(name, _month(), _limit()))

    @app.get("/api/torrent/<hash_>")
    def api_torrent(hash_: str):
        got = views.torrent(_hash(hash_), _month(), _limit())
        if got is None:
            return jsonify({"error": f"{_hash(hash_)} is not tracked and has no counters"}), 404
        return _answer(got)

    @app.get("/api/operators")
    def api_operators():
        hours = request.args.get("hours", "6")
        if not (hours.isascii() and hours.isdigit()) or not 1 <= int(hours) <= 48:
            _fail(400, "hours: expected 1 to 48")
        return _answer(views.operators(int(hours)))

    @app.get("/metrics")
    def metrics():
        if "application/openmetrics-text" in request.headers.get("Accept", ""):
            return Response(openmetrics.generate_latest(registry), 200,
                            {"Content-Type": openmetrics.CONTENT_TYPE_LATEST})
        return Response(generate_latest(registry), 200, {"Content-Type": CONTENT_TYPE_LATEST})

    @app.get("/healthz")
    def healthz():
        views.client.ping()
        return jsonify({"ok": True, "time": time.time()})


def _answer(view: dict):
    """JSON, or with ``?format=csv&table=NAME`` that table as CSV."""
    if request.args.get("format") != "csv":
        return jsonify(view)
    name = request.args.get("table", "")
    rows = view.get("tables", {}).get(name)
    if rows is None:
        _fail(400, f"table: expected one of {', '.join(view.get('tables', {}))}")
    buf = io.StringIO()
    fields = list(rows[0]) if rows else ["metric", "count"]
    w = csv.writer(buf, lineterminator="\n")
    # Names are GeoIP's and trackers' (third parties): a cell a spreadsheet would run as a formula
    # (=HYPERLINK(...), -2+3+cmd|...) is written with a leading ' (crawler.safe_text).
    w.writerow(csv_row(fields))
    w.writerows(csv_row(row.get(f) for f in fields) for row in rows)
    filename = f"peercrawl-{request.path.rsplit('/', 1)[-1] or 'overview'}-{name}.csv"
    return Response(buf.getvalue(), 200, {"Content-Type": "text/csv; charset=utf-8",
                                          "Content-Disposition": f'attachment; filename="{_ascii(filename)}"'})


def _ascii(s: str) -> str:
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else "_" for ch in s)


def _month() -> str | None:
    m = request.args.get("month") or None
    if m in (None, "all", "lifetime"):
        return None
    try:
        return check_month(m)
    except ValueError as e:
        _fail(400, f"month: {e}")


def _limit(default: int = 20, most: int = 1000) -> int:
    raw = request.args.get("limit", str(default))
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= most:  # "²".isdigit() is True
        _fail(400, f"limit: expected 1 to {most}")
    return int(raw)


def _hash(h: str) -> str:
    try:
        return info_hash_hex(h)
    except ValueError:
        _fail(404, "expected a 40-hex info-hash")
