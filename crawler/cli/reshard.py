"""``peercrawl reshard --shards N``: move a crawl to N queue shards (contract §9)."""

from __future__ import annotations

import json
import sys
import time

import click

from crawler.cli import human
from crawler.cli.context import open_context
from crawler.queue.resharding import Reshard
from crawler.shard_layout import MAX_SHARDS


@click.command("reshard")
@click.option("--shards", type=click.IntRange(1, MAX_SHARDS), required=True,
              help=f"The queue's new number of shards (1-{MAX_SHARDS}).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(shards: int, as_json: bool) -> None:
    """Move every torrent of the namespace's queue into N shards.

    Moves a single Redis's crawl (one hash tag) into the sharded layout of
    a Redis Cluster, or changes a sharded crawl's count. Stop every worker
    first: the move refuses to start while one is live, and workers refuse
    to start until it has finished. Safe to run again after a crash or an
    interruption: it goes on where it stopped. The counters keep their
    shards (docs/operations.md says why).
    """
    ctx = open_context(resolve_layout=False)
    shown = [0.0]

    def progress(moved: int) -> None:
        if sys.stderr.isatty() and time.monotonic() - shown[0] > 0.2:
            shown[0] = time.monotonic()
            click.echo(f"\rmoved {human.count(moved, 'torrent')}", err=True, nl=False)

    result = Reshard(ctx.client, ctx.settings.namespace, shards, progress).run(time.time())
    if sys.stderr.isatty() and shown[0]:
        click.echo("", err=True)
    if as_json:
        click.echo(json.dumps(result, sort_keys=True))
    else:
        click.echo(f"moved {human.count(result['moved'], 'torrent')}: {result['from']} → "
                   f"{human.count(result['to'], 'shard')}")
