"""``peercrawl torrent HASH``: everything known about one torrent (SPEC §7)."""

from __future__ import annotations

import json
import sys
import time

import click

from crawler.cli.context import open_context
from crawler.errors import ItemError
from crawler.items import info_hash
from crawler.queue_view import QueueView
from crawler.sources import redact


@click.command("torrent")
@click.argument("hash_")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def command(hash_: str, as_json: bool) -> None:
    """Show one torrent: state, score, visits, seeders, leechers, trackers.

    A quarantined torrent also shows why: its leases that expired in a row and
    its last visit error.
    """
    try:
        h = info_hash(hash_)
    except ItemError as e:
        raise click.BadParameter(str(e), param_hint="HASH") from None
    ctx = open_context()
    info = QueueView(ctx.client, ctx.keys).torrent(h, time.time())
    if info is None:
        if as_json:
            click.echo(json.dumps({"info_hash": h, "state": None}))
        click.echo(f"peercrawl torrent: {h} is not tracked", err=True)
        sys.exit(1)
    # Tracker URLs may carry passkeys: shown redacted.
    info["trackers"] = [redact.url(u) for u in info.get("trackers", [])]
    info["tracker_not_before"] = {redact.url(u): t for u, t in (info.get("tracker_not_before") or {}).items()}
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    for name, value in info.items():
        if isinstance(value, list):
            value = ", ".join(value) or "-"
        elif name == "quarantine":
            value = value["message"] + " (add --readmit HASH returns it)"
        click.echo(f"{name:>18}  {'-' if value is None else value}")
