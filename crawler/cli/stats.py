"""Placeholder until the counters issue builds `peercrawl stats`."""

import click


@click.command("stats")
def command() -> None:
    """Not built yet."""
    raise click.ClickException("'stats' is not built yet")
