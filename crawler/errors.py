"""One error hierarchy for peercrawl.

``PeercrawlError`` is the root. User-facing commands catch it at one boundary
(``crawler.cli``) and print ``str(error)`` as a single line, without a
traceback. Faults of the remote side (a malformed tracker reply) are kept apart
from our own (a bad setting, an unusable database); library errors (redis,
socket) are re-raised as ours with ``from`` at the boundary where they arrive.
"""


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
