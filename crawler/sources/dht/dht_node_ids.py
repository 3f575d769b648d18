"""Which DHT nodes a scrape may believe apart: one per network prefix, and node ids tied to their IP (BEP 42).

Anyone may run many DHT nodes and pick their ids next to an info-hash, so
that a lookup for it meets mostly theirs. A BEP 33 scrape unions the bloom
filters of the nodes nearest the hash: eight such nodes with plausible
filters can set the estimate to anything from 0 to saturation. Two rules
bound what one holder of addresses can do (``dht_scrape`` applies them):

- ``prefix``: the /24 of an IPv4 address, the /64 of an IPv6 one. A lookup
  asks one node per prefix (the first it hears of), so a block of addresses
  counts as one node, in the lookup as in the union of filters. An
  IPv4-mapped IPv6 address has its IPv4 prefix. libtorrent applies the same
  rule to its own lookups (``dht_restrict_search_ips``).
- ``valid_id``: BEP 42 ties the first 21 bits of a node id to its external
  IP: they must be those of ``crc32c((ip & 0x030f3fff) | (r << 29))`` for
  IPv4, or ``crc32c((ip64 & 0x0103070f1f3f7fff) | (r << 61))`` for the
  high 64 bits of an IPv6 address, where ``r`` is the low 3 bits of the
  id's last byte. An address block then holds ids in few places of the id
  space (a /24: at most 256 x 8 of the 2 million 21-bit prefixes), so its
  ids cannot sit next to an arbitrary hash. Nodes on local networks
  (BEP 42's list: 10/8, 172.16/12, 192.168/16, 169.254/16, 127/8; and for
  IPv6, as libtorrent: loopback, link-local, unique-local fc00::/7) are
  exempt: they do not know their external address.

CRC32C is Castagnoli's (reflected polynomial 0x82F63B78), here by table:
it hashes 4 or 8 bytes per node.
"""

from __future__ import annotations

import ipaddress
import socket

_MAPPED = bytes(10) + b"\xff\xff"  # the first 12 bytes of an IPv4-mapped IPv6 address
_V4_MASK = 0x030F3FFF
_V6_MASK = 0x0103070F1F3F7FFF
_EXEMPT = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8",
    "::1/128", "fe80::/10", "fc00::/7",
))


def _table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) of ``data``."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _address(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    a = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return a.ipv4_mapped
    return a


def prefix(ip: str) -> bytes:
    """The network a node's address stands for: the /24 of IPv4 (3 bytes), the /64 of IPv6 (8 bytes).

    Raises ``ValueError`` for text that is no IP address.
    """
    text = ip.split("%", 1)[0]
    try:
        if ":" not in text:
            return socket.inet_pton(socket.AF_INET, text)[:3]
        packed = socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        raise ValueError(f"{ip!r} is no IP address") from None
    return packed[12:15] if packed[:12] == _MAPPED else packed[:8]


def exempt(ip: str) -> bool:
    """True for a local-network address, whose node id BEP 42 does not tie (module note)."""
    a = _address(ip)
    return any(a in n for n in _EXEMPT if n.version == a.version)


def id_prefix(ip: str, r: int) -> int:
    """The 21 bits (as the top of a 32-bit number) that BEP 42 wants an id of ``ip`` with random ``r`` to start with."""
    a = _address(ip)
    r &= 7
    if a.version == 4:
        masked = (int(a) & _V4_MASK) | (r << 29)
        crc = crc32c(masked.to_bytes(4, "big"))
    else:
        masked = ((int(a) >> 64) & _V6_MASK) | (r << 61)
        crc = crc32c(masked.to_bytes(8, "big"))
    return crc & 0xFFFFF800


def valid_id(node_id: bytes, ip: str) -> bool:
    """Whether ``node_id`` (20 bytes) may belong to a node at ``ip`` under BEP 42 (always, for an exempt address).

    Raises ``ValueError`` for text that is no IP address or an id that is not 20 bytes.
    """
    if len(node_id) != 20:
        raise ValueError(f"a node id has 20 bytes, not {len(node_id)}")
    if exempt(ip):
        return True
    return int.from_bytes(node_id[:4], "big") & 0xFFFFF800 == id_prefix(ip, node_id[19])


def make_id(ip: str, r: int, base: bytes = bytes(20)) -> bytes:
    """``base`` (20 bytes) made a BEP 42 id of ``ip``: its first 21 bits replaced, its last byte ``r`` (0-255).

    The id nearest ``base`` that BEP 42 lets a node at ``ip`` with that
    ``r`` have, as fake nodes in tests need it. Raises ``ValueError`` for an
    ``r`` outside 0-255 or a ``base`` that is not 20 bytes.
    """
    if len(base) != 20 or not 0 <= r <= 255:
        raise ValueError("make_id takes a 20-byte base and an r of 0-255")
    head = (id_prefix(ip, r) | (int.from_bytes(base[:4], "big") & 0x7FF)).to_bytes(4, "big")
    return head + base[4:19] + bytes([r])
