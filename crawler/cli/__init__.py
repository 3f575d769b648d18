"""The ``peercrawl`` command line: one module per command, on top of every room.

``main`` is the one boundary where peercrawl's own errors become a single
line on stderr and a non-zero exit, never a traceback; it patches gevent
first for the commands that crawl or serve. ``context`` is what every
command does first (settings, logging, the Redis connection, secrets
hidden); ``crawl`` holds ``worker`` and ``run``, ``progress`` is ``run``'s
intake and live line; every other module is one command. See the
contract, §7.
"""

from __future__ import annotations

import gc
import sys
from importlib import import_module

import click

from crawler.errors import PeercrawlError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="peercrawl")
def cli() -> None:
    """peercrawl: a distributed BitTorrent peer crawler.

    Settings come from the environment (see the README); flags override them.
    """


# Each command, the module that holds it and its name there.
COMMANDS = {name: (name, "command") for name in
            ("add", "status", "torrent", "stats", "flush", "secret", "dashboard", "export", "reshard")}
COMMANDS |= {"worker": ("crawl", "worker"), "run": ("crawl", "run")}


def _register(names: list[str] | None = None) -> None:
    """Adds the commands ``names`` (default: every one) to ``cli``, importing only their modules: a
    worker starts without the other commands' imports (rich's tables, the dashboard's server)."""
    for name in COMMANDS if names is None else names:
        if name not in cli.commands:
            module, attribute = COMMANDS[name]
            cli.add_command(getattr(import_module(f"crawler.cli.{module}"), attribute))


def main(argv: list[str] | None = None) -> None:
    """The ``peercrawl`` entry point: gevent's patching first for the commands that serve or crawl, then click."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["worker"]:
        # Nothing a worker's start-up builds is garbage (modules, classes, settings, scripts), yet
        # the collector would walk the growing heap again and again while ~600 modules load: a
        # tenth of the start-up. The command turns it back on (workers.process.tune_gc). Not for
        # ``run``, whose start-up adds the items it is given.
        gc.disable()
    if args[:1] in (["worker"], ["run"], ["dashboard"]):
        # gevent patches before redis-py and ssl are imported (crawler.cli.crawl).
        from crawler.cli.patching import patch

        patch()
    _register([args[0]] if args[:1] and args[0] in COMMANDS else None)
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
    finally:
        gc.enable()
