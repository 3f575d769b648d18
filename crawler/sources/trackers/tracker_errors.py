"""The tracker errors the clients and codecs share.

Where each comes from: ``TrackerTimeout`` is silence (either client, at its
deadline); ``TrackerRefused`` a tracker that answered no (an HTTP ``failure
reason``, a UDP error action); ``HttpReplyError`` an HTTP response the codec
cannot read, ``ReplyTooLarge`` one past the caller's cap; ``HttpRequestError``
our own request that cannot be written. They sit in ``crawler.errors``'
hierarchy: the remote side's faults under ``RemoteProtocolError``.
"""

from __future__ import annotations

from crawler.errors import PeercrawlError, RemoteProtocolError


class TrackerTimeout(PeercrawlError):
    """A tracker did not answer within the tries and deadline allowed."""


class TrackerRefused(RemoteProtocolError):
    """The tracker answered with a failure reason (HTTP) or an error action (UDP)."""


class HttpReplyError(RemoteProtocolError):
    """An HTTP tracker's response is malformed; the message says how."""


class ReplyTooLarge(HttpReplyError):
    """The response passed the caller's cap (``Settings.http_max_bytes`` of body, twice that on the wire)."""


class HttpRequestError(PeercrawlError):
    """Our own request cannot be written: a target or Host that is not a valid HTTP field."""


class ScrapeUnsupported(PeercrawlError):
    """The tracker does not scrape: its URL has no scrape form (BEP 48), or it refused or did not
    find the scrape (a UDP error action, an HTTP 4xx). Learned per tracker; it is announced to."""
