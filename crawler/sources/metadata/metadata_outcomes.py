"""How a metadata fetch ends: ``Fetch`` (what libtorrent reported), the ``NoMetadata`` kinds, and the
line saying why no info dictionary came.

``crawler.sources.metadata.metadata_fetch`` fills a ``Fetch`` from libtorrent's
alerts (in the hub) and reads it when the fetch's wait is over. One fetch
adds its torrent to one session per transport (``metadata_session``: TCP
and uTP are tried at once, neither waiting for the other to fail), so what
is counted per peer is counted per connection: (transport, endpoint).
"""

from __future__ import annotations

from dataclasses import dataclass

from gevent.event import Event

KINDS = {
    "no_peers": "no peer to ask: none given, or every one refused by the address policy",
    "busy": "a fetch of this torrent is already running in this process",
    "no_slot": "no free slot (PEERCRAWL_METADATA_IN_FLIGHT) before the deadline",
    "timeout": "no peer sent the metadata before the deadline",
    "unreachable": "at the deadline, every peer given had been dropped or blocked (none connected)",
    "bad_metadata": "metadata sent did not hash to the info-hash, and no peer sent the right one",
    "malformed": "the metadata hashed right but is not a usable info dictionary",
    "error": "libtorrent refused the torrent or could not hand its metadata over",
    "closed": "the fetcher was closed",
}

# How the reason names a transport.
TRANSPORT_NAMES = {"tcp": "TCP", "utp": "uTP"}


@dataclass(frozen=True)
class NoMetadata:
    """A fetch that brought no info dictionary: ``kind`` is a key of ``KINDS``, ``reason`` one line for a log."""

    kind: str
    reason: str


class Fetch:
    """One torrent in the fetcher's sessions, from its adds to its removals.

    ``transports``: the sessions its torrent is added to; ``handles``:
    transport -> its torrent there, once added; ``out``: the transports
    whose torrent is out of its session (removed, or never added).
    ``live``: (transport, endpoint) being connected or connected;
    ``dropped``: (transport, endpoint handed over) -> why libtorrent dropped
    or blocked it; ``refused``: endpoints peers named (holepunch) that the
    filter blocked.
    """

    __slots__ = ("info_hash", "given", "transports", "event", "retired", "handles", "out", "received", "asked",
                 "info", "error", "bad_metadata", "live", "dropped", "refused", "done")

    def __init__(self, info_hash: bytes, given: list[tuple[str, int]], transports: tuple[str, ...]):
        self.info_hash, self.given, self.transports = info_hash, given, transports
        self.event = Event()
        self.retired = Event()  # its torrents are out of every session
        self.handles: dict[str, object] = {}
        self.out: set[str] = set()
        self.received = False  # libtorrent has the metadata (in one session at least)
        self.asked = False  # the info dictionary was asked of libtorrent
        self.info: bytes | None = None  # the bencoded info dictionary
        self.error: str | None = None
        self.bad_metadata = 0
        self.live: set[tuple[str, tuple]] = set()
        self.dropped: dict[tuple[str, tuple], str] = {}
        self.refused = 0
        self.done = False  # the fetch stopped waiting: its torrents go as soon as they are added

    def all_out(self) -> bool:
        """Its torrent is out of every session it was added to."""
        return self.out.issuperset(self.transports)

    def all_dropped(self) -> bool:
        """Every peer handed over was dropped or blocked over every transport, none is connected, and no
        metadata came."""
        return not self.received and not self.live and len(self.dropped) >= len(self.given) * len(self.transports)


def failure(f: Fetch, timeout: float) -> NoMetadata:
    """Why ``f``, over at its deadline (not closed, no info dictionary), brought nothing: its kind and one line
    saying what was seen (connections, drops and one drop's cause, endpoints refused)."""
    if f.error is not None:
        return NoMetadata("error", f.error)
    over = " and ".join(TRANSPORT_NAMES.get(t, t) for t in f.transports)
    seen = (f"{len(f.given)} peers given, tried over {over}: {len(f.live)} connecting or connected, "
            f"{len(f.dropped)} dropped or blocked")
    if f.dropped:
        seen += f", e.g. {next(iter(f.dropped.values()))}"
    if f.refused:
        seen += f"; {f.refused} endpoints named by peers refused"
    if f.bad_metadata:
        return NoMetadata("bad_metadata", f"{f.bad_metadata} time(s) a peer sent metadata that did not hash to the "
                                          f"info-hash, and none sent the right one ({seen})")
    if f.all_dropped():
        return NoMetadata("unreachable", f"no peer connected within {timeout:g}s ({seen})")
    return NoMetadata("timeout", f"no peer sent the metadata within {timeout:g}s ({seen})")
