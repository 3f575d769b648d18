"""The ``peercrawl worker`` and ``peercrawl run`` commands (contract §7).

gevent is monkey-patched at the entry point: ``crawler.cli.main`` patches
before anything imports redis-py or ssl when the command is ``worker`` or
``run``; the other commands never run patched. The command functions patch
again only if they were entered some other way (tests calling them
directly), which is safe: redis-py looks ``socket.socket`` up when it
connects, and no connection of it exists before the patch.
"""

from __future__ import annotations

import gc

import click


def _patch() -> None:
    from crawler.cli.patching import patch

    patch()


def _auto_or(value: str | None, parse, option: str) -> int | str | None:
    """``value`` of ``option`` through ``parse`` (``crawler.envparse.auto_or``'s): "auto" or a
    bounded number; None when not given. Raises BadParameter."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=option) from None


def _client(ctx, size: int | None):
    """The worker's Redis client: a blocking pool for ``size`` runners (auto: the upper bound)."""
    from workers.connections import worker_client

    return worker_client(ctx.client, size or ctx.settings.concurrency_max)


def _options(f):
    f = click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="S",
                     help="Stop claiming after S seconds; running visits finish.")(f)
    f = click.option("--until-idle", is_flag=True,
                     help="Exit 0 once nothing is ready or in flight (cooling torrents do not count).")(f)
    f = click.option("--max-visits", type=click.IntRange(min=1), metavar="N",
                     help="Stop after claiming N torrents; running visits finish.")(f)
    f = click.option("--concurrency", metavar="N|auto",
                     help="Visits at a time, or auto (the default, PEERCRAWL_CONCURRENCY) to grow the "
                          "pool between PEERCRAWL_CONCURRENCY_MIN and _MAX until visits queue.")(f)
    return f


def _supervise(ctx, n: int, concurrency, max_visits, until_idle, duration) -> int:
    """``n`` worker processes under a ``workers.supervisor.Supervisor``; its exit status."""
    import sys

    from workers.supervisor import Supervisor, child_env, shares

    argvs = []
    for share in shares(max_visits, n):
        if share == 0:
            continue
        argv = [sys.executable, "-m", "crawler", "worker", "--processes", "1"]
        argv += ["--concurrency", concurrency] if concurrency else []
        argv += ["--max-visits", str(share)] if share else []
        argv += ["--until-idle"] if until_idle else []
        argv += ["--duration", repr(duration)] if duration else []
        argvs.append(argv)
    envs = [child_env(ctx.settings, i, len(argvs)) for i in range(len(argvs))]
    return Supervisor(argvs, ctx.settings.shutdown_seconds, envs).run()


@click.command("worker")
@_options
@click.option("--processes", metavar="N|auto",
              help="Worker processes, each with its own pool (default PEERCRAWL_PROCESSES, 1); auto: one per "
                   "core this process may use.")
def worker(concurrency, max_visits, until_idle, duration, processes) -> None:
    """Claim torrents, ask their trackers and the DHT for peers, record and score them.

    SIGTERM or SIGINT: stop claiming, finish or hand back every claimed
    torrent within 25 s, flush StatHat, exit 0. With several processes, each
    drains the same way, and a process that dies is started again.

    The worker never connects to peers, except with PEERCRAWL_METADATA=on:
    it then asks the peers of torrents without a name for their metadata
    (BEP 9), and each peer asked learns the worker's IP address, that it
    wants this torrent's metadata, and that it runs libtorrent
    (docs/metadata.md).
    """
    from crawler import envparse

    c = _auto_or(concurrency, envparse.pool_size, "--concurrency")
    n = _auto_or(processes, envparse.processes, "--processes")
    _patch()
    from crawler.cli.context import open_context

    ctx = open_context(records=True)
    n = ctx.settings.processes if n is None else n
    if n == "auto":
        from workers.cpus import usable_cpus

        n = usable_cpus()
    assert isinstance(n, int)  # a count, or "auto" made one just above
    if n > 1:
        gc.enable()  # the supervisor runs for as long as its workers (crawler.cli.main)
        raise SystemExit(_supervise(ctx, n, concurrency, max_visits, until_idle, duration))
    # Imported after logging is configured: logs.get binds at import time.
    from workers.process import Process, tune_gc

    size = ctx.settings.pool_size(c)
    proc = Process(ctx.settings, _client(ctx, size), ctx.keys, concurrency=size, max_visits=max_visits,
                   until_idle=until_idle, duration=duration)
    tune_gc()
    raise SystemExit(proc.run())


@click.command("run")
@click.argument("items", nargs=-1)
@_options
@click.option("--dashboard-host", default="127.0.0.1", show_default=True,
              help="Where the dashboard listens; anything but loopback needs PEERCRAWL_DASHBOARD_TOKEN "
                   "(docs/dashboard.md).")
@click.option("--dashboard-port", type=click.IntRange(0, 65535), default=8650, show_default=True,
              help="The dashboard's port (0: any free port).")
@click.option("--no-dashboard", is_flag=True, help="Do not serve the dashboard.")
def run(items, concurrency, max_visits, until_idle, duration, dashboard_host, dashboard_port, no_dashboard) -> None:
    """One machine: add ITEMs (info-hashes, magnet links, .torrent files), then crawl.

    Runs the worker and the StatHat flusher with the embedded defaults (an
    embedded Redis when REDIS_URL is unset). On a terminal it shows live
    progress: visits, peers found and countries so far.
    """
    from crawler import envparse

    c = _auto_or(concurrency, envparse.pool_size, "--concurrency")
    _patch()
    import sys

    from crawler.cli.context import open_context

    ctx = open_context(records=True)
    if not no_dashboard:  # refused before anything is added or crawled
        from crawler.dashboard.access import check_bind

        check_bind(dashboard_host, ctx.settings.dashboard_token, "--dashboard-host")
    from crawler.cli.progress import Progress, add_items
    from workers.process import Process, tune_gc

    bad = add_items(ctx, items)
    size = ctx.settings.pool_size(c)
    progress = Progress(ctx.client, ctx.keys, live=sys.stderr.isatty())
    server = None if no_dashboard else _dashboard(ctx, dashboard_host, dashboard_port)
    proc = Process(ctx.settings, _client(ctx, size), ctx.keys, concurrency=size, max_visits=max_visits,
                   until_idle=until_idle, duration=duration, on_visit=progress.visit)
    tune_gc()
    try:
        with progress:
            code = proc.run()
    finally:
        if server is not None:
            server.stop(timeout=2)
    progress.summary()
    raise SystemExit(code or (1 if bad else 0))


def _dashboard(ctx, host: str, port: int):
    """Serve the dashboard beside the workers, on the same gevent loop; None if the port is taken."""
    from crawler.dashboard.server import address, make_server

    server = make_server(ctx.client, ctx.keys, ctx.settings, host, port, flag="--dashboard-host")
    try:
        server.start()
    except OSError as e:
        # Another run (or dashboard) of this machine holds the port: crawl anyway.
        click.echo(f"peercrawl run: no dashboard: cannot listen on {host}:{port}: {e.strerror or e}", err=True)
        return None
    click.echo(f"peercrawl run: dashboard at {address(server)}", err=True)
    return server

