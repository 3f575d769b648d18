"""Address policy (SPEC §3): refuse non-public tracker hosts and DHT nodes.

Loopback, private, link-local, multicast, reserved and unspecified addresses
are refused unless ``PEERCRAWL_ALLOW_PRIVATE=1``. Checked after DNS
resolution, so a public name that resolves to 127.0.0.1 is refused too.
"""

from __future__ import annotations

import ipaddress

from crawler.errors import PeercrawlError


class AddressRefused(PeercrawlError):
    """An address is outside the public internet and private ones are not allowed."""


def kind_of(ip: str) -> str | None:
    """The reason ``ip`` is not public ("loopback", "private", ...), or None."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    for name in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(addr, "is_" + name):
            return name.replace("_", "-")
    if not addr.is_global:
        return "non-global"
    return None


def check(ip: str, allow_private: bool, what: str) -> None:
    """Raise ``AddressRefused`` if ``ip`` may not be contacted.

    ``what`` names the thing for the message, e.g. "tracker udp://x:1".
    """
    if allow_private:
        return
    reason = kind_of(ip)
    if reason is not None:
        raise AddressRefused(
            f"{what} resolves to {ip}, a {reason} address; set PEERCRAWL_ALLOW_PRIVATE=1 to allow it"
        )
