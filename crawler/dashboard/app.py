"""The dashboard's routes: page shells, their JSON and CSV, ``/metrics`` (SPEC §10).

Pages are HTML shells (``templates/``) whose script (``static/dashboard.js``)
polls ``/api/...`` and redraws; every ``/api`` view answers CSV of one of its
tables with ``?format=csv&table=NAME``. Nothing here writes to Redis.

Access: with a token (``PEERCRAWL_DASHBOARD_TOKEN``) every request must
carry it as ``?token=`` (answered by a redirect that sets an HttpOnly
cookie), as that cookie, or as ``Authorization: Bearer``. The Content
Security Policy allows scripts, styles and data only from this origin: the
page cannot load anything from a CDN even by mistake.
"""

from __future__ import annotations

import csv
import hmac
import io
import time
from urllib.parse import urlencode

import redis
from flask import Flask, Response, abort, jsonify, redirect, render_template, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from crawler import logs
from crawler.counters.names import check_month, info_hash_hex
from crawler.dashboard.metrics import registry_for
from crawler.dashboard.views import Views
from crawler.errors import StoreError

log = logs.get("dashboard")

COOKIE = "peercrawl_token"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def create_app(views: Views, token: str | None = None) -> Flask:
    """The WSGI app over ``views``; ``token``: required on every request when set.

    Without a token only requests addressed to a loopback name are answered
    (``Host: localhost`` or ``127.0.0.1``, any port): a web page elsewhere
    cannot read the crawl through a DNS name rebound to 127.0.0.1.
    """
    app = Flask(__name__, static_folder="static", template_folder="templates")
    app.json.sort_keys = False
    app.json.ensure_ascii = False
    app.before_request(lambda: _check_access(token))
    app.after_request(_headers)
    app.register_error_handler(StoreError, _store_error)
    app.register_error_handler(redis.RedisError, _store_error)  # a read that does not wrap its errors
    app.register_error_handler(401, _unauthorized)
    _pages(app)
    _data(app, views)
    return app


def _check_access(token: str | None) -> Response | None:
    """None to serve the request; a redirect that moves ``?token=`` into a cookie; else 401/403."""
    if token is None:
        host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
        if host.lower() not in LOOPBACK_NAMES:
            abort(Response("without PEERCRAWL_DASHBOARD_TOKEN only loopback addresses are served\n", 403))
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


def _unauthorized(_e):
    return Response("a token is required: open the address with ?token=PEERCRAWL_DASHBOARD_TOKEN\n", 401,
                    {"Content-Type": "text/plain; charset=utf-8", "WWW-Authenticate": "Bearer"})


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
            abort(Response("hours: expected 1 to 48\n", 400))
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
        abort(Response(f"table: expected one of {', '.join(view.get('tables', {}))}\n", 400))
    buf = io.StringIO()
    fields = list(rows[0]) if rows else ["metric", "count"]
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
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
        abort(Response(f"month: {e}\n", 400))


def _limit(default: int = 20, most: int = 1000) -> int:
    raw = request.args.get("limit", str(default))
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= most:  # "²".isdigit() is True
        abort(Response(f"limit: expected 1 to {most}\n", 400))
    return int(raw)


def _hash(h: str) -> str:
    try:
        return info_hash_hex(h)
    except ValueError:
        abort(Response("expected a 40-hex info-hash\n", 404))
