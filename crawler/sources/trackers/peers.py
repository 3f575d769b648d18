"""Compact peer lists (BEP 23 for IPv4, BEP 7 for IPv6), sans-IO.

A compact entry is the address in network order followed by a big-endian
port: 6 bytes for IPv4, 18 for IPv6. UDP announce replies (BEP 15) carry the
same entries. A list whose length is not a multiple of the entry size is
malformed as a whole (we cannot tell where the garbage is), so it raises
rather than guessing.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from itertools import repeat

from crawler.errors import RemoteProtocolError

Peer = tuple[str, int]
_V4 = struct.Struct(">4sH")
_ntop, _AF_INET = socket.inet_ntop, socket.AF_INET
# Lists of at most this many IPv4 entries (a whole reply of most trackers, which cap numwant at 200)
# are unpacked by a format of their size, kept once made (~70 bytes an entry: ~2 MB if all are).
WHOLE_FORMS = 256
_forms: dict[int, struct.Struct] = {}
_V4_MAPPED = b"\0" * 10 + b"\xff\xff"  # the first 12 bytes of an IPv4-mapped IPv6 address


class PeerListError(RemoteProtocolError):
    """A compact peer list is malformed; the message says how."""


def parse_compact(data: bytes, family: int = socket.AF_INET) -> tuple[Peer, ...]:
    """Parse a compact peer list of ``family`` (AF_INET: 6-byte, AF_INET6: 18-byte entries).

    Returns (ip, port) pairs in the order given, ip in ipaddress's canonical
    text. Entries with port 0 are kept out (nobody can be reached there).
    Raises ``PeerListError`` when the length is not a multiple of the entry size.
    """
    if _entry_size(data, family) == 6:
        return _parse_v4(data)
    out = []
    for off in range(0, len(data), 18):
        (port,) = struct.unpack_from(">H", data, off + 16)
        if port == 0:
            continue
        out.append((str(ipaddress.IPv6Address(data[off : off + 16])), port))
    return tuple(out)


def parse_pairs(data: bytes, family: int = socket.AF_INET) -> tuple[tuple[bytes, int], ...]:
    """``parse_compact`` without the texts: (packed ip, port) pairs in the order given, an
    IPv4-mapped IPv6 address as its 4-byte IPv4 (``crawler.sources.compact_peers``)."""
    if _entry_size(data, family) == 6:
        ips, ports = _unpack_v4(data)
        pairs = zip(ips, ports)
        return tuple(peer for peer in pairs if peer[1]) if 0 in ports else tuple(pairs)
    out = []
    for off in range(0, len(data), 18):
        (port,) = struct.unpack_from(">H", data, off + 16)
        if port:
            ip = data[off : off + 16]
            out.append((ip[12:] if ip[:12] == _V4_MAPPED else ip, port))
    return tuple(out)


def _entry_size(data: bytes, family: int) -> int:
    """6 or 18, the entry size of ``family``; raises ``PeerListError`` unless ``data`` is whole entries."""
    size = 6 if family == socket.AF_INET else 18
    if len(data) % size:
        kind = "IPv4" if size == 6 else "IPv6"
        raise PeerListError(f"{kind} compact peer list of {len(data)} bytes is not a multiple of {size}")
    return size


def _unpack_v4(data: bytes) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    """The packed IPs and the ports of whole 6-byte entries. The loops run in C."""
    n = len(data) // 6
    if n <= WHOLE_FORMS:  # one unpack of the whole list: half the cost of iter_unpack's tuples
        form = _forms.get(n) or _forms.setdefault(n, struct.Struct(">" + "4sH" * n))
        fields = form.unpack(data)
        return fields[0::2], fields[1::2]
    ips, ports = zip(*_V4.iter_unpack(data))
    return ips, ports


def _parse_v4(data: bytes) -> tuple[Peer, ...]:
    """``parse_compact`` of whole 6-byte entries. Dotted decimal is IPv4's canonical text, which
    C's inet_ntop writes (~5x ipaddress). The loops run in C (``map``, ``zip``, the slices). No
    memory of texts made before: a crawl meets more addresses than one could hold, and a lookup
    that misses, then the text made and kept, costs twice ``inet_ntop`` alone (a hit costs three
    quarters of it)."""
    if not data:
        return ()
    ips, ports = _unpack_v4(data)
    texts = map(_ntop, repeat(_AF_INET, len(ips)), ips)
    if 0 in ports:
        return tuple(peer for peer in zip(texts, ports) if peer[1])
    return tuple(zip(texts, ports))


def check_compact(data: bytes, family: int = socket.AF_INET) -> None:
    """Raise ``PeerListError`` as ``parse_compact`` would, without building the peers."""
    _entry_size(data, family)


def encode_compact(peers, family: int = socket.AF_INET) -> bytes:
    """The compact form of (ip, port) pairs of one family (tests and hostile trackers use it)."""
    parts = []
    for ip, port in peers:
        addr = ipaddress.IPv4Address(ip) if family == socket.AF_INET else ipaddress.IPv6Address(ip)
        parts.append(addr.packed + struct.pack(">H", port))
    return b"".join(parts)


def canonical_ip(text: str) -> str:
    """``text`` as ipaddress's canonical form; raises ``PeerListError`` if it is not an IP."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise PeerListError(f"peer address {text[:60]!r} is not an IP address") from None
