"""The ``peercrawl`` command line: one module per command, on top of every room.

``main`` is the one boundary where peercrawl's own errors become a single
line on stderr and a non-zero exit, never a traceback; it patches gevent
first for the commands that crawl or serve. ``context`` is what every
command does first (settings, logging, the Redis connection, secrets
hidden); ``crawl`` holds ``worker`` and ``run``, ``progress`` is ``run``'s
intake and live line; ``add``, ``status``, ``torrent``, ``stats``,
``flush``, ``export``, ``secret``, ``dashboard`` and ``reshard`` are one
command each. See the contract, §7.
"""

from __future__ import annotations

import sys

import click

from crawler.errors import PeercrawlError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="peercrawl")
def cli() -> None:
    """peercrawl: a distributed BitTorrent peer crawler.

    Settings come from the environment (see the README); flags override them.
    """


def _register() -> None:
    from crawler.cli import add, crawl, dashboard, export, flush, reshard, secret, stats, status, torrent

    for mod in (add, status, torrent, stats, flush, secret, dashboard, export, reshard):
        cli.add_command(mod.command)
    for command in crawl.commands:
        cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """The ``peercrawl`` entry point: gevent's patching first for the commands that serve or crawl, then click."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["worker"], ["run"], ["dashboard"]):
        # gevent patches before redis-py and ssl are imported (crawler.cli.crawl).
        from crawler.cli.patching import patch

        patch()
    _register()
    try:
        cli.main(args=argv, prog_name="peercrawl", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except PeercrawlError as e:
        click.echo(f"peercrawl: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
