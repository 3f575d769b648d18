"""Placeholder until the counters issue builds `peercrawl flush`."""

import click


@click.command("flush")
def command() -> None:
    """Not built yet."""
    raise click.ClickException("'flush' is not built yet")
