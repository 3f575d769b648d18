"""``peercrawl flush``: drain the StatHat outbox once (contract §6, §7)."""

from __future__ import annotations

import json

import click

from crawler.cli.context import open_context
from crawler.queue.view import QueueView
from crawler.stathat import Flusher


@click.command("flush")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(as_json: bool) -> None:
    """Post pending counter increments and torrents.count to StatHat once.

    Without STATHAT_EZKEY there is nothing to post. Exits 1 if the post
    failed; the increments stay queued (in flight) for the next flush.
    """
    ctx = open_context()
    result = Flusher(ctx.client, ctx.keys, ctx.settings, tracked=QueueView(ctx.client, ctx.keys).tracked).flush_once()
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
    elif not result["enabled"]:
        click.echo("STATHAT_EZKEY is unset: nothing is posted to StatHat")
    elif result["busy"]:
        click.echo("another flusher is posting right now; nothing to do")
    elif result["ok"]:
        extra = " (recovered a batch left in flight)" if result["recovered"] else ""
        click.echo(f"posted {result['increments']} increments of {result['stats']} stats "
                   f"in {result['requests']} requests{extra}")
    else:
        click.echo(f"post failed, increments kept for the next flush: {result['error']}", err=True)
    if not result["ok"]:
        # SystemExit, not ctx.exit: main() runs click with standalone_mode off,
        # where click swallows Exit's code.
        raise SystemExit(1)
