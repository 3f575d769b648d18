"""Address policy (contract §3): refuse non-public tracker hosts and DHT nodes.

Loopback, private, link-local, site-local, multicast, reserved and
unspecified addresses are refused unless ``PEERCRAWL_ALLOW_PRIVATE=1``.
Checked after DNS resolution, so a public name that resolves to 127.0.0.1 is
refused too.

IPv6 addresses that carry an IPv4 address inside are judged by that IPv4
address, whatever the Python version's ``ipaddress`` tables say of the IPv6
range: IPv4-mapped (``::ffff:0:0/96``), NAT64 (``64:ff9b::/96``, how a DNS64
network reaches IPv4 trackers), 6to4 (``2002::/16``, the IPv4 in bits 16-47)
and Teredo (``2001::/32``: both the server's IPv4 and the client's, which is
stored inverted; either one not public refuses the address). Other forms are
not recognised (6rd prefixes are chosen by each ISP; ISATAP puts the IPv4 in
the interface identifier of an otherwise ordinary address) and get the plain
IPv6 rules. ``crawler.sources.dht.dht_session`` blocks the same ranges for DHT
nodes, and more where a range cannot be expressed.

``resolve`` turns a tracker host into the addresses to try, in order, each
one checked: a name with several addresses (A and AAAA records, round-robin
DNS) is tried address after address by the clients, and if any address of a
name is refused the whole name is refused (one inside address is enough to
reach inside).
"""

from __future__ import annotations

import ipaddress
import socket as _stdsocket
from collections.abc import Callable

from gevent import socket

from crawler.errors import PeercrawlError

# check(ip, what) raises AddressRefused for an address not to contact.
AddressCheck = Callable[[str, str], None]
# resolver(host, port) -> [(family, sockaddr), ...] in the order to try them;
# socket.getaddrinfo's shape, reduced. Injectable so tests can give a name
# several loopback addresses without touching /etc/hosts or DNS.
Resolver = Callable[[str, int], list]


class AddressRefused(PeercrawlError):
    """An address is outside the public internet and private ones are not allowed."""


class HostUnresolved(PeercrawlError):
    """A tracker host name does not resolve to any IPv4 or IPv6 address."""


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
TEREDO = ipaddress.IPv6Network("2001::/32")
SIXTOFOUR = ipaddress.IPv6Network("2002::/16")
# Deprecated (RFC 3879) but still routed inside some sites; Python counts it
# as global.
SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")
# IPv6 documentation (RFC 9637); only newer Pythons know it.
DOCUMENTATION = ipaddress.IPv6Network("3fff::/20")


def kind_of(ip: str) -> str | None:
    """The reason ``ip`` is not public ("loopback", "private", "6to4 address whose ..."), or None."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return _plain(addr.ipv4_mapped)
        if addr in NAT64:
            return _embedded("NAT64", ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
        if addr in SIXTOFOUR:
            assert addr.sixtofour is not None  # ipaddress gives it for every address of 2002::/16
            return _embedded("6to4", addr.sixtofour)
        if addr in TEREDO:
            assert addr.teredo is not None  # ipaddress gives it for every address of 2001::/32
            server, client = addr.teredo
            return _embedded("Teredo", server, "server ") or _embedded("Teredo", client, "client ")
        if addr in SITE_LOCAL:
            return "site-local"
        if addr in DOCUMENTATION:
            return "documentation"
    return _plain(addr)


def _plain(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    for name in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(addr, "is_" + name):
            return name.replace("_", "-")
    if not addr.is_global:
        return "non-global"
    return None


def _embedded(form: str, v4: ipaddress.IPv4Address, role: str = "") -> str | None:
    reason = _plain(v4)
    return None if reason is None else f"{form} address whose embedded {role}IPv4 {v4} is a {reason}"


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


def policy(allow_private: bool) -> AddressCheck:
    """The address policy of contract §3 as a check function (raises AddressRefused)."""
    return lambda ip, what: check(ip, allow_private, what)


def system_resolver(host: str, port: int) -> list:
    """(family, sockaddr) pairs of ``host`` from the system resolver (gevent's, cooperative).

    Raises OSError or UnicodeError as getaddrinfo does.
    """
    # Encoded here, not in gevent's resolver thread, which would print the
    # UnicodeError of a hostile name (a surrogate, a 300-byte label) as a
    # traceback on stderr before handing it back.
    host = host.encode("idna").decode("ascii")
    infos = socket.getaddrinfo(host, port, 0, _stdsocket.SOCK_DGRAM)
    return [(fam, sockaddr) for fam, _, _, _, sockaddr in infos]


def resolve(host: str, port: int, check: AddressCheck, what: str, resolver: Resolver | None = None) -> list[tuple]:
    """The distinct (family, sockaddr) pairs of ``host``, in resolver order, each passed through ``check``.

    Raises ``HostUnresolved`` if the name does not resolve (or only to
    families other than IPv4/IPv6) and ``AddressRefused`` if any address is
    refused.
    """
    try:
        pairs = (resolver or system_resolver)(host, port)
    except (OSError, UnicodeError) as e:
        raise HostUnresolved(f"{what}: cannot resolve {host!r}: {e}") from e
    out = []
    for fam, sockaddr in pairs:
        if fam not in (_stdsocket.AF_INET, _stdsocket.AF_INET6):
            continue
        check(sockaddr[0], what)
        if (fam, sockaddr) not in out:
            out.append((fam, sockaddr))
    if not out:
        raise HostUnresolved(f"{what}: {host!r} has no IPv4 or IPv6 address")
    return out


def first(targets: list, good) -> list:
    """``targets`` with ``good`` (the address that worked last time, if still among them) moved to the front."""
    if good is None or targets[0] == good or good not in targets:
        return targets
    return [good] + [t for t in targets if t != good]


def share_of_time(deadline: float, now: float, addresses_left: int) -> float:
    """The deadline for trying one of ``addresses_left`` addresses: an equal share of what is left.

    The last address gets everything left, so a single-address host keeps
    the whole deadline; a dead first address cannot eat the others' time.
    """
    return now + max(0.0, deadline - now) / max(1, addresses_left)
