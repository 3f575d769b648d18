"""Serving the dashboard on gevent's WSGI server (the workers' event loop).

``peercrawl dashboard`` runs it alone; ``peercrawl run`` beside its workers.
gevent must have patched the standard library first (``crawler.cli.main``
does for these commands) so Redis calls of one request do not block others.
"""

from __future__ import annotations

from collections.abc import Iterable

from gevent.pywsgi import WSGIServer

from crawler import logs
from crawler.dashboard.access import check_bind
from crawler.dashboard.app import create_app
from crawler.dashboard.views import Views

log = logs.get("dashboard")


def make_server(client, keys, settings, host: str = "127.0.0.1", port: int = 8650,
                flag: str = "--host") -> WSGIServer:
    """A started-on-``start()`` server for the namespace ``keys`` (port 0: any free port).

    Raises ``SettingsError`` (naming ``flag`` and PEERCRAWL_DASHBOARD_TOKEN) when ``host`` is not
    loopback and no token is set (``crawler.dashboard.access.check_bind``).
    """
    check_bind(host, settings.dashboard_token, flag)
    app = create_app(Views(client, keys, settings), token=settings.dashboard_token)
    # log=None: requests are not logged line by line (the page polls every few seconds).
    return WSGIServer((host, port), app, log=None, error_log=_ErrorLog())


def address(server: WSGIServer) -> str:
    """The address to open ``server`` at, an IPv6 host in brackets."""
    assert isinstance(server.address, tuple)  # a server made by make_server listens on (host, port)
    host, port = server.address[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


class _ErrorLog:
    """gevent's error log as structlog warnings (also the app's ``wsgi.errors``: write, writelines, flush)."""

    def write(self, text: str) -> None:
        text = text.strip()
        if text:
            log.warning("dashboard_error", detail=text[-2000:])

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass
