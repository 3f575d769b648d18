"""BEP 15 UDP tracker packets, sans-IO: requests to bytes, bytes to frozen replies.

Every reply starts with (action, transaction id); ``peek`` reads just that so
the client can route a datagram to the waiting request (and drop strays)
before parsing the rest with ``parse_reply``. Announce replies carry 6-byte
IPv4 entries when the tracker was reached over IPv4 and 18-byte IPv6 entries
over IPv6 (BEP 15's IPv6 extension), so parsing needs the family.

Malformed packets raise ``UdpPacketError`` naming the fault.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import NamedTuple

from crawler.errors import RemoteProtocolError, one_line
from crawler.sources.trackers.peers import Peer, PeerListError, check_compact, parse_compact, parse_pairs

PROTOCOL_ID = 0x41727101980

CONNECT, ANNOUNCE, SCRAPE, ERROR = 0, 1, 2, 3
ACTION_NAMES = {CONNECT: "connect", ANNOUNCE: "announce", SCRAPE: "scrape", ERROR: "error"}

EVENT_NONE, EVENT_COMPLETED, EVENT_STARTED, EVENT_STOPPED = 0, 1, 2, 3

_ANNOUNCE = struct.Struct(">QII20s20sQQQIIIiH")  # 98 bytes
_HEAD = struct.Struct(">II")


class UdpPacketError(RemoteProtocolError):
    """A UDP tracker datagram is malformed; the message says how."""


# --- requests ---------------------------------------------------------------


def connect_request(transaction_id: int) -> bytes:
    """The 16-byte connect request."""
    return struct.pack(">QII", PROTOCOL_ID, CONNECT, transaction_id)


@dataclass(frozen=True)
class AnnounceRequest:
    """A BEP 15 announce request; ``encode`` packs it, ``decode`` reads it back."""
    connection_id: int
    transaction_id: int
    info_hash: bytes
    peer_id: bytes
    port: int
    num_want: int = -1
    event: int = EVENT_NONE
    downloaded: int = 0
    left: int = 0
    uploaded: int = 0
    key: int = 0
    ip: int = 0

    def encode(self) -> bytes:
        """The 98-byte announce request; raises ValueError for bad hash/peer id lengths."""
        return announce_request(self.connection_id, self.transaction_id, self.info_hash, self.peer_id, self.port,
                                self.num_want, self.event, self.downloaded, self.left, self.uploaded, self.key, self.ip)

    @classmethod
    def decode(cls, data: bytes) -> AnnounceRequest:
        """Parse an announce request (used by the hostile trackers in tests)."""
        if len(data) < _ANNOUNCE.size:
            raise UdpPacketError(f"announce request of {len(data)} bytes, want {_ANNOUNCE.size}")
        (cid, action, tid, ih, pid, down, left, up, event, ip, key, nw, port) = _ANNOUNCE.unpack_from(data)
        if action != ANNOUNCE:
            raise UdpPacketError(f"action {action} is not announce")
        return cls(cid, tid, ih, pid, port, nw, event, down, left, up, key, ip)


def announce_request(connection_id: int, transaction_id: int, info_hash: bytes, peer_id: bytes, port: int,
                     num_want: int = -1, event: int = EVENT_NONE, downloaded: int = 0, left: int = 0,
                     uploaded: int = 0, key: int = 0, ip: int = 0) -> bytes:
    """``AnnounceRequest(...).encode()`` without the request as a value: what a client sends twice a
    visit (the announce and its withdrawal). Raises ValueError for bad hash/peer id lengths."""
    if len(info_hash) != 20 or len(peer_id) != 20:
        raise ValueError("info_hash and peer_id must be 20 bytes")
    return _ANNOUNCE.pack(connection_id, ANNOUNCE, transaction_id, info_hash, peer_id, downloaded, left, uploaded,
                          event, ip, key, num_want, port)


def scrape_request(connection_id: int, transaction_id: int, info_hashes: list[bytes]) -> bytes:
    """A scrape request for up to 74 info-hashes (BEP 15's limit per packet)."""
    if not 1 <= len(info_hashes) <= 74 or any(len(h) != 20 for h in info_hashes):
        raise ValueError("scrape wants 1..74 info-hashes of 20 bytes")
    return struct.pack(">QII", connection_id, SCRAPE, transaction_id) + b"".join(info_hashes)


# --- replies ----------------------------------------------------------------
# Named tuples: two or three are made a visit, each in a fraction of a frozen dataclass's time.


class ConnectReply(NamedTuple):
    """A BEP 15 connect reply: the connection id to announce with."""
    transaction_id: int
    connection_id: int


class AnnounceReply(NamedTuple):
    """A BEP 15 announce reply, its compact peers decoded: (ip text, port) pairs, or (packed ip, port)
    pairs when parsed ``packed`` (``peers.parse_pairs``)."""
    transaction_id: int
    interval: int
    leechers: int
    seeders: int
    peers: tuple[Peer, ...] | tuple[tuple[bytes, int], ...]
    # peer entries past the client's limit, cut before decoding
    cut: int = 0


class ScrapeEntry(NamedTuple):
    """One torrent's figures in a BEP 15 scrape reply."""
    seeders: int
    completed: int
    leechers: int


class ScrapeReply(NamedTuple):
    """A BEP 15 scrape reply: one entry per info-hash asked, in order."""
    transaction_id: int
    entries: tuple[ScrapeEntry, ...]


class ErrorReply(NamedTuple):
    """A BEP 15 error reply: the tracker's message."""
    transaction_id: int
    message: str


Reply = ConnectReply | AnnounceReply | ScrapeReply | ErrorReply


def peek(data: bytes) -> tuple[int, int]:
    """(action, transaction id) of a reply; raises ``UdpPacketError`` under 8 bytes."""
    if len(data) < 8:
        raise UdpPacketError(f"datagram of {len(data)} bytes is shorter than the 8-byte header")
    return _HEAD.unpack_from(data)


def parse_reply(data: bytes, family: int = socket.AF_INET, peers: bool = True, packed: bool = False) -> Reply:
    """Parse any tracker reply; ``family`` is the address family the tracker was reached over.

    ``peers=False`` checks an announce reply's peer list but leaves
    ``AnnounceReply.peers`` empty (a withdrawal's reply is read for its
    counts only); ``packed``: its peers as (packed ip, port) pairs. Raises ``UdpPacketError`` for a short packet, an unknown
    action or a peer list that is not whole entries.
    """
    action, tid = peek(data)
    if action == CONNECT:
        if len(data) < 16:
            raise UdpPacketError(f"connect reply of {len(data)} bytes, want 16")
        return ConnectReply(tid, struct.unpack_from(">Q", data, 8)[0])
    if action == ANNOUNCE:
        if len(data) < 20:
            raise UdpPacketError(f"announce reply of {len(data)} bytes is shorter than its 20-byte header")
        interval, leechers, seeders = struct.unpack_from(">III", data, 8)
        try:
            if peers:
                entries = parse_pairs(data[20:], family) if packed else parse_compact(data[20:], family)
            else:
                check_compact(data[20:], family)
                entries = ()
        except PeerListError as e:
            raise UdpPacketError(f"announce reply: {e}") from None
        return AnnounceReply(tid, interval, leechers, seeders, entries)
    if action == SCRAPE:
        body = data[8:]
        if len(body) % 12:
            raise UdpPacketError(f"scrape reply body of {len(body)} bytes is not a multiple of 12")
        scraped = tuple(ScrapeEntry(*struct.unpack_from(">III", body, o)) for o in range(0, len(body), 12))
        return ScrapeReply(tid, scraped)
    if action == ERROR:
        return ErrorReply(tid, one_line(data[8:].decode("utf-8", "replace"), 300))
    raise UdpPacketError(f"unknown action {action}")


# --- encoders for replies (the hostile and fake trackers in tests use them) --


def encode_reply(reply: Reply, family: int = socket.AF_INET) -> bytes:
    """The datagram for ``reply`` (inverse of ``parse_reply``)."""
    from crawler.sources.trackers.peers import encode_compact

    if isinstance(reply, ConnectReply):
        return struct.pack(">IIQ", CONNECT, reply.transaction_id, reply.connection_id)
    if isinstance(reply, AnnounceReply):
        head = struct.pack(">IIIII", ANNOUNCE, reply.transaction_id, reply.interval, reply.leechers, reply.seeders)
        return head + encode_compact(reply.peers, family)
    if isinstance(reply, ScrapeReply):
        body = b"".join(struct.pack(">III", e.seeders, e.completed, e.leechers) for e in reply.entries)
        return struct.pack(">II", SCRAPE, reply.transaction_id) + body
    return struct.pack(">II", ERROR, reply.transaction_id) + reply.message.encode("utf-8")
