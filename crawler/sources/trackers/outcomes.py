"""What one exchange with a tracker came to, as a visit sees it and as tracker health keeps it.

An answer, a refusal (the tracker's error reply: alive, never backs off) or a
failure (any exception of an exchange but ``StoreError``, ours), each
recorded in the tracker's health with its message; an address the policy
refuses is noted apart and never backs the tracker off. A tracker backing
off is not asked: the visit gets that as its failure. Every error text is
redacted (a passkey in a URL never reaches a log, a report or Redis).
"""

from __future__ import annotations

import time

from crawler import redact
from crawler.sources import addresses
from crawler.sources.result import SourceResult
from crawler.sources.trackers.health import BLOCKED, FAILURE, REFUSAL, TrackerHealth
from crawler.sources.trackers.tracker_errors import TrackerRefused


class Outcomes:
    """Failures of one process's tracker exchanges, as results and in ``health``."""

    def __init__(self, health: TrackerHealth):
        self.health = health

    def backing_off(self, url: str, configured: int) -> SourceResult | None:
        """The failed result of asking ``url`` while it backs off, or None: it may be asked now."""
        until = self.health.backing_off_until(url)
        if until is None:
            return None
        return self.failed(url, f"tracker backing off for {until - time.time():.0f} s more", configured)._replace(
            asked="backoff")

    def failed(self, url: str, error: str, max_peers: int) -> SourceResult:
        """A failed result of ``url`` with ``error``, redacted."""
        return SourceResult.failed(url, redact.text(error, url), max_peers)

    def fault(self, url: str, e: Exception, configured: int, note: bool = True) -> SourceResult:
        """The failed result for what an exchange with ``url`` raised, noted in the tracker's health (``note``)."""
        if note:
            self.note(url, e)
        if isinstance(e, addresses.AddressRefused):
            return self.failed(url, str(e), configured)._replace(blocked=True)
        if isinstance(e, TrackerRefused):
            return self.failed(url, redact.text(str(e), url), configured)._replace(refused=True)
        return self.failed(url, f"{type(e).__name__}: {e}", configured)

    def note(self, url: str, e: Exception) -> None:
        """``e``, what one exchange with ``url`` raised, in the tracker's health.

        An address our policy refuses is not the tracker's fault (noted apart, never backs it off); an
        error reply is a refusal; anything else (silence, garbage, a protocol or TLS error, a name that
        does not resolve) a failure. Each with its message.
        """
        if isinstance(e, addresses.AddressRefused):
            self.health.record(url, BLOCKED, message=str(e))
        elif isinstance(e, TrackerRefused):
            self.health.record(url, REFUSAL, message=redact.text(str(e), url))
        else:
            self.health.record(url, FAILURE, message=f"{type(e).__name__}: {e}")
