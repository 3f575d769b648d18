"""One error hierarchy for peercrawl.

``PeercrawlError`` is the root. User-facing commands catch it at one boundary
(``crawler.cli``) and print ``str(error)`` as a single line, without a
traceback. Faults of the remote side (a malformed tracker reply) are kept apart
from our own (a bad setting, an unusable database); library errors (redis,
socket) are re-raised as ours with ``from`` at the boundary where they arrive.

Text that came from outside (a tracker's refusal, an item's bytes) goes into
a message through ``one_line``, so no newline, NUL or terminal escape it
holds reaches a log line or a terminal.
"""


def one_line(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marking the cut), unprintable characters escaped.

    Escapes are Python's (``\\n``, ``\\x1b``, ``\\udcff``), so a byte that was
    not UTF-8 still shows which byte it was.
    """
    if len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class PeercrawlError(Exception):
    """Base of every error peercrawl raises on purpose."""


class SettingsError(PeercrawlError):
    """A setting (environment variable or flag) has a bad value.

    The message names the variable and says what is wrong.
    """


class StoreError(PeercrawlError):
    """Redis could not be reached or answered with an error."""


class ItemError(PeercrawlError):
    """An ITEM given to ``add`` (hash, magnet, .torrent) is not usable."""


class RemoteProtocolError(PeercrawlError):
    """A remote peer (tracker, DHT node, StatHat) sent something malformed."""


class GeoError(PeercrawlError):
    """The GeoIP database is missing or unreadable."""
