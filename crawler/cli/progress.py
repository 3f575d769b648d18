"""``peercrawl run``'s intake and live progress (contract §7).

``add_items`` admits the command's ITEMs through ``peercrawl add``'s own
``admit`` (one line on stderr per bad item, whatever the cause). ``Progress`` counts this process's visits and peers
(fed by ``Worker.on_visit``) and, on a terminal, redraws one line a second
with the countries recorded so far (the size of the lifetime countries index).
"""

from __future__ import annotations

import sys
import time

import click
import gevent
import redis

from crawler.cli.add import admit
from crawler.counters.names import LIFETIME
from crawler.counters.rollup import index_keys


def add_items(ctx, items) -> int:
    """Add ``items`` to the queue of ``ctx`` as ``peercrawl add`` does; returns how many were bad."""
    counts = admit(ctx, ((f"argument {n}", text, None) for n, text in enumerate(items, 1)), who="peercrawl run")
    if counts["invalid"] < len(items):
        click.echo(f"added {counts['added']}, already tracked {counts['already_tracked']}", err=True)
    return counts["invalid"]


class Progress:
    """Visits, peers and countries so far; a live line on stderr when ``live``."""

    def __init__(self, client, keys, live: bool, every: float = 1.0):
        self.client, self.keys = client, keys
        self.live, self.every = live, every
        self.visits = self.failed = self.peers = self.new = 0
        self.started = time.monotonic()
        # sharded: the settled totals (the workers settle them each flush cycle)
        self._countries_key = index_keys(keys, LIFETIME, ("countries",))[0]
        self._live = None
        self._loop = None

    def visit(self, v) -> None:
        """``Worker.on_visit``: count one visit (a skipped one asked nobody: not a visit)."""
        if v.state == "skipped":
            return
        self.visits += 1
        self.failed += v.state == "failed"
        self.peers += v.peers
        self.new += v.new

    def countries(self) -> int:
        """Countries with at least one counted user so far (0 if Redis does not answer)."""
        try:
            return int(self.client.zcard(self._countries_key))
        except redis.RedisError:
            return -1

    def line(self) -> str:
        """The progress line: visits, peers, new peers, countries, elapsed time."""
        secs = time.monotonic() - self.started
        return (f"{self.visits} visits ({self.failed} failed), {self.peers} peers found, {self.new} new, "
                f"{self.countries()} countries so far, {secs:.0f} s")

    def __enter__(self):  # -> self
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(stderr=True), auto_refresh=False, transient=False)
            self._live.__enter__()
            self._loop = gevent.spawn(self._refresh_loop)
        return self

    def _refresh_loop(self) -> None:
        from rich.text import Text

        while True:
            self._live.update(Text(self.line()), refresh=True)
            gevent.sleep(self.every)

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.kill()
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def summary(self) -> None:
        """Print the last progress line to stdout."""
        click.echo(self.line(), file=sys.stdout)
