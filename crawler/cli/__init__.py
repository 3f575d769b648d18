"""The ``peercrawl`` command line (SPEC §7).

``main`` is the one boundary where peercrawl's own errors become a single
line on stderr and a non-zero exit, never a traceback.
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
    from crawler.cli import add, dashboard, export, flush, reshard, secret, stats, status, torrent
    from crawler.cli import worker as worker_cli

    for mod in (add, status, torrent, stats, flush, secret, dashboard, export, reshard):
        cli.add_command(mod.command)
    for command in worker_cli.commands:
        cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """The ``peercrawl`` entry point: gevent's patching first for the commands that serve or crawl, then click."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["worker"], ["run"], ["dashboard"]):
        # gevent patches before redis-py and ssl are imported (crawler.cli.worker).
        from gevent import monkey

        monkey.patch_all()
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
