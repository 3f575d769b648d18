"""A peer's IP in the forms the counters use: packed bytes (what is fingerprinted), canonical text.

Every form ``ipaddress`` accepts is read; an IPv4-mapped IPv6 address is its
IPv4 address, so a peer counts once whichever way a source wrote it. The
common case (IPv4 text) goes through C's ``inet_pton``/``inet_ntop``, ~10x
``ipaddress``. The address itself is never stored: only its keyed
fingerprint (``marks.Fingerprinter``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from functools import partial


def normalize_ip(ip: str) -> bytes | None:
    """The packed form of ``ip`` (IPv4-mapped IPv6 as IPv4); None if not an IP."""
    canonical = canonical_ip(ip)
    return None if canonical is None else canonical[0]


def canonical_ip(ip: str) -> tuple[bytes, str] | None:
    """``ip``'s packed form (``normalize_ip``) and its canonical text; None if not an IP."""
    try:
        # Dotted-quad IPv4, what trackers' compact lists give: C's inet_pton is
        # ~10x ipaddress and accepts exactly the forms ipaddress does (no
        # leading zeros, four parts), so such text is already canonical;
        # anything else takes the general path.
        return _pton(_AF_INET, ip), ip
    except (OSError, TypeError, ValueError):  # ValueError: a NUL or a lone surrogate
        packed = normalize_any_ip(ip)
    return None if packed is None else (packed, ip_text(packed))


class PackedIPs(frozenset):
    """Distinct IPs already in their packed form (``normalize_ip``'s: an IPv4-mapped IPv6 address as
    its IPv4), as a tracker's compact peer list gives them: the recorder takes them as they are,
    where IP texts are parsed first. A frozenset of bytes; the type says they need no parsing."""

    __slots__ = ()


def packed_ips(ips: Iterable[str] | PackedIPs) -> set[bytes] | PackedIPs:
    """The distinct packed forms of the IP texts ``ips`` (``normalize_ip``), text that is no IP left out;
    ``ips`` itself when packed already. Dotted-quad IPv4 texts, what compact lists give, are read in
    one C loop."""
    if isinstance(ips, PackedIPs):
        return ips
    try:
        return set(map(_pton4, ips))
    except (OSError, TypeError, ValueError):
        return {p for p in map(normalize_ip, ips) if p is not None}


def ip_text(packed: bytes) -> str:
    """The canonical text of a packed IP (C's inet_ntop for IPv4: ~10x ipaddress)."""
    return _ntop(_AF_INET, packed) if len(packed) == 4 else str(ipaddress.ip_address(packed))


def normalize_any_ip(ip: str) -> bytes | None:
    """``normalize_ip`` through ``ipaddress`` alone: any form it accepts (IPv6, spaces around)."""
    try:
        addr = ipaddress.ip_address(ip.strip())
    except (ValueError, AttributeError):
        return None
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.packed


_pton, _ntop, _AF_INET = socket.inet_pton, socket.inet_ntop, socket.AF_INET
_pton4 = partial(_pton, _AF_INET)
