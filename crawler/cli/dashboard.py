"""``peercrawl dashboard``: the web page and ``/metrics`` (contract §10, docs/dashboard.md)."""

from __future__ import annotations

import click


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback (127.0.0.0/8, ::1) needs PEERCRAWL_DASHBOARD_TOKEN.")
@click.option("--port", type=click.IntRange(0, 65535), default=8650, show_default=True,
              help="Port to listen on (0: any free port).")
def command(host: str, port: int) -> None:
    """Serve the dashboard (analysts' map and tables, operators' view) and /metrics, read-only."""
    from crawler.cli.patching import patch

    patch()
    from crawler.cli.context import open_context
    from crawler.dashboard.server import address, make_server

    ctx = open_context()
    # Raises SettingsError (one line, exit 2) for a non-loopback --host without a token.
    server = make_server(ctx.client, ctx.keys, ctx.settings, host, port)
    try:
        server.start()
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    click.echo(f"peercrawl dashboard: {address(server)}", err=True)
    import signal

    import gevent
    from gevent.event import Event

    stop = Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop.set)
    stop.wait()
    server.stop(timeout=5)
