"""What a worker process's parts tell whoever watches them: the ``Observer`` they are built with.

The trackers (each announce's and scrape's outcome, each request sent), the
DHT (each lookup's outcome, each traversal), the claims and the recording
(how long each took) and the visits (how long each stage held the slot) call
their observer as things happen. This base does
nothing, so a process without a metrics port pays a method call; the
worker's ``/metrics`` (``workers.worker_metrics``) is the observer that
counts. Calls are synchronous and must not block or raise.
"""

from __future__ import annotations


class Observer:
    """Told what a process does; ignores it all (subclasses count what they want)."""

    def announced(self, url: str, result) -> None:
        """An announce to the tracker at ``url`` ended with ``result`` (a ``SourceResult``)."""

    def scraped(self, url: str, result) -> None:
        """A scrape of ``url`` for a visit settled it with ``result``, or None: the visit announces
        (peers there, or the tracker does not scrape)."""

    def sent(self, url: str | None, kind: str, n: int) -> None:
        """``n`` requests of ``kind`` went to the tracker at ``url``; ``url`` None: a DHT traversal."""

    def looked_up(self, result) -> None:
        """A DHT lookup ended with ``result`` (a ``SourceResult``)."""

    def claimed(self, seconds: float) -> None:
        """A claim call took ``seconds``."""

    def recorded(self, seconds: float) -> None:
        """Recording one visit's peers took ``seconds`` (its wait for its batch included)."""

    def visit_stages(self, seconds: dict[str, float], visits: int = 1) -> None:
        """Each of ``visits`` visits (a batch) held its slot ``seconds[stage]`` in each stage it reached,
        and ``seconds["slot"]`` in all (``workers.visit_stages.Laps.whole``)."""


# The observer of a process nobody watches.
QUIET = Observer()
