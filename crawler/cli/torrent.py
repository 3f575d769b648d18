"""``peercrawl torrent HASH``: everything known about one torrent (contract §7)."""

from __future__ import annotations

import datetime
import json
import sys
import time

import click

from crawler.cli.context import open_context
from crawler.cli.torrent_view import render
from crawler.errors import ItemError
from crawler.queue.due_now import DueNow
from crawler.queue.pins import Pins
from crawler.queue.torrent_record import shown
from crawler.queue.view import QueueView
from crawler.torrents.items import info_hash


def _until(value: str | None) -> float | None:
    """``--until``: an ISO date or date and time (UTC unless it says otherwise), in the future."""
    if value is None:
        return None
    try:
        at = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date (e.g. 2027-01-31 or 2027-01-31T18:00)",
                                 param_hint="--until") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.UTC)
    if at.timestamp() <= time.time():
        raise click.BadParameter(f"{value} has passed", param_hint="--until")
    return at.timestamp()


@click.command("torrent")
@click.argument("hash_")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option("--pin", is_flag=True, help="Never evict this torrent (staged eviction), for ever or --until.")
@click.option("--until", "until", metavar="DATE", help="With --pin: the pin ends at DATE (ISO, UTC).")
@click.option("--unpin", is_flag=True, help="End this torrent's pin.")
@click.option("--due-now", is_flag=True, help="Visit it at the next claim instead of at its due time.")
def command(hash_: str, as_json: bool, pin: bool, until: str | None, unpin: bool, due_now: bool) -> None:
    """Show one torrent: state, score, visits, seeders, leechers, trackers.

    A quarantined torrent also shows why: its leases that expired in a row and
    its last visit error. ``--pin`` exempts it from eviction (``--until``
    DATE: until then) and ``--unpin`` ends that; ``--due-now`` makes a cooling
    torrent due at once (its score kept; trackers inside their min interval
    still wait). Each then shows it.
    """
    try:
        h = info_hash(hash_)
    except ItemError as e:
        raise click.BadParameter(str(e), param_hint="HASH") from None
    if pin and unpin:
        raise click.UsageError("--pin and --unpin exclude each other")
    if until is not None and not pin:
        raise click.UsageError("--until goes with --pin")
    ends = _until(until)
    ctx = open_context()
    if pin or unpin:
        pins = Pins(ctx.client, ctx.keys)
        done = pins.pin(h, ends) if pin else pins.unpin(h)
        if done in ("evicted", "untracked"):
            why = "is evicted (add --readmit HASH tracks it again)" if done == "evicted" else "is not tracked"
            click.echo(f"peercrawl torrent: {h} {why}; nothing to {'pin' if pin else 'unpin'}", err=True)
            sys.exit(1)
    if due_now:
        done = DueNow(ctx.client, ctx.keys).make_due(h)
        if done in ("quarantined", "evicted", "untracked"):
            why = {"untracked": "is not tracked",
                   "evicted": "is evicted (add --readmit HASH tracks it again)",
                   "quarantined": "is quarantined (add --readmit HASH returns it)"}[done]
            click.echo(f"peercrawl torrent: {h} {why}; nothing made due", err=True)
            sys.exit(1)
    info = QueueView(ctx.client, ctx.keys).torrent(h, time.time(), tuple(t.url for t in ctx.settings.trackers))
    if info is None:
        if as_json:
            click.echo(json.dumps({"info_hash": h, "state": None}))
        click.echo(f"peercrawl torrent: {h} is not tracked", err=True)
        sys.exit(1)
    info = shown(info)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    render(info, time.time())
