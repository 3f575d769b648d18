"""``peercrawl run``'s intake and live progress (contract §7).

``add_items`` admits the command's ITEMs through ``peercrawl add``'s own
``admit`` (one line on stderr per bad item, whatever the cause). ``Progress`` counts this process's visits and peers
(fed by ``Worker.on_visit``) and, on a terminal, redraws one line a second
with the countries recorded so far (the size of the lifetime countries index)
and, under it, why the last visit failed; at the end its summary says what
the run did, why visits failed, and where to look next.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import click
import gevent
import redis

from crawler import spawning
from crawler.cli import human
from crawler.cli.add import admit
from crawler.counters.names import LIFETIME, UNPLACED_MEMBER
from crawler.counters.rollup import index_keys
from crawler.safe_text import terminal

if TYPE_CHECKING:
    from rich.live import Live

# Distinct failure reasons counted for the summary (errors name their trackers, so they could be many).
MAX_REASONS = 1000
# Seconds without a visit after which the live line suggests what to do.
IDLE_HINT_AFTER = 10.0


def add_items(ctx, items) -> int:
    """Add ``items`` to the queue of ``ctx`` as ``peercrawl add`` does; returns how many were bad."""
    counts = admit(ctx, ((f"argument {n}", text, None) for n, text in enumerate(items, 1)), who="peercrawl run")
    if counts["invalid"] < len(items):
        click.echo(f"added {counts['added']}, already tracked {counts['already_tracked']}", err=True)
    return counts["invalid"]


class Progress:
    """Visits, peers and countries so far; a live line on stderr when ``live``, the last failure's reason
    under it; ``summary`` at the end."""

    def __init__(self, client, keys, live: bool, every: float = 1.0):
        self.client, self.keys = client, keys
        self.live, self.every = live, every
        self.visits = self.failed = self.peers = self.new = 0
        self.last_failure: str | None = None
        # why visits failed, each reason's count (bounded: reasons are few, errors name their tracker)
        self.reasons: Counter[str] = Counter()
        self.started = time.monotonic()
        # sharded: the settled totals (the workers settle them each flush cycle)
        self._countries_key = index_keys(keys, LIFETIME, ("countries",))[0]
        self._live: Live | None = None
        self._loop: gevent.Greenlet | None = None

    def visit(self, v) -> None:
        """``Worker.on_visit``: count one visit (a skipped one asked nobody: not a visit)."""
        if v.state == "skipped":
            return
        self.visits += 1
        self.peers += v.peers
        self.new += v.new
        if v.state == "failed":
            self.failed += 1
            self.last_failure = v.error or "no source answered"
            if self.last_failure in self.reasons or len(self.reasons) < MAX_REASONS:
                self.reasons[self.last_failure] += 1

    def countries(self) -> int:
        """Countries with at least one counted user so far (-1 if Redis does not answer)."""
        try:
            p = self.client.pipeline(transaction=False)
            p.zcard(self._countries_key)
            p.zscore(self._countries_key, UNPLACED_MEMBER)  # counted, but no country
            n, nowhere = p.execute()
            return int(n) - (nowhere is not None)
        except redis.RedisError:
            return -1

    def line(self) -> str:
        """The progress line: visits, peers, new peers, countries, elapsed time."""
        secs = time.monotonic() - self.started
        countries = self.countries()
        return (f"{_n(self.visits, 'visit')} ({self.failed:,} failed), {_n(self.peers, 'peer')} found, "
                f"{self.new:,} new, {'?' if countries < 0 else f'{countries:,}'} countries so far, "
                f"{human.duration(secs)}")

    def _shown(self):
        from rich.text import Text

        text = Text(self.line())
        if self.last_failure:
            text.append(f"\nlast failure: {terminal(self.last_failure)}", style="yellow")
        elif not self.visits and time.monotonic() - self.started > IDLE_HINT_AFTER:
            text.append("\nnothing visited yet: is any torrent tracked? (peercrawl status; peercrawl add ITEM)",
                        style="yellow")
        return text

    def __enter__(self):  # -> self
        if self.live:
            from rich.console import Console
            from rich.live import Live

            # transient: the summary is what stays on the screen
            self._live = Live(console=Console(stderr=True), auto_refresh=False, transient=True)
            self._live.__enter__()
            self._loop = spawning.spawn(self._refresh_loop)
        return self

    def _refresh_loop(self) -> None:
        assert self._live is not None  # spawned by __enter__, once the Live is made
        while True:
            self._live.update(self._shown(), refresh=True)
            gevent.sleep(self.every)

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.kill()
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def summary(self) -> None:
        """What the run did, why visits failed, and where to look next, on stdout."""
        lines = [self.line()]
        for reason, n in self.reasons.most_common(3):
            lines.append(f"  {_n(n, 'visit')} failed: {terminal(reason)}")
        if len(self.reasons) > 3:
            lines.append(f"  and {len(self.reasons) - 3:,} other reasons (peercrawl torrent HASH shows each)")
        if self.visits and self.failed == self.visits:
            lines.append("no visit was answered: peercrawl torrent HASH says what each source said")
        elif self.peers:
            lines.append("next: peercrawl stats countries, peercrawl stats torrents, peercrawl status")
        elif not self.visits:
            lines.append("nothing was visited: peercrawl status shows what is tracked and when it is due")
        click.echo("\n".join(lines), file=sys.stdout)


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"
