"""Which addresses the DHT node listens on: IPv4, and IPv6 where the machine has it (BEP 32).

libtorrent runs one DHT node per listen socket, so a session listening on
``0.0.0.0`` and ``[::]`` takes part in both DHTs: the IPv4 one and the IPv6
one (a separate network: IPv6 nodes know IPv6 nodes and hand out IPv6 peers).
Each node bootstraps from the routers of its own family, so the bootstrap
list keeps the addresses of the families listened on.

A machine without IPv6 must still crawl, on IPv4 alone, and say so once.
``usable`` decides it before libtorrent is started, for each IPv6 listen
address, the way the node itself would meet the problem:

1. bind a UDP socket to the address (port 0): this fails where the kernel
   has no IPv6 (``EAFNOSUPPORT``) or the address is not this machine's
   (``EADDRNOTAVAIL``);
2. ``connect`` that socket to the first IPv6 bootstrap address, or to
   ``ROUTE_PROBE`` when there is none: on UDP this only looks the route up
   and sends nothing; no route (``ENETUNREACH``) means no IPv6 network;
3. for the any-address ``::``, the source address the kernel picked for
   that route must be neither loopback nor link-local (unless the target is
   one too): a machine whose only IPv6 addresses are ``::1`` and ``fe80::``
   ones cannot be reached by IPv6 nodes (libtorrent would not even run a
   node on those).

``listening`` drops the IPv6 addresses that fail (one warning naming why)
and the bootstrap addresses of families no longer listened on; with no
address left it raises ``SettingsError``.
"""

from __future__ import annotations

import ipaddress
import socket

from crawler import logs
from crawler.errors import SettingsError
from crawler.source_settings import listen_text

log = logs.get(__name__)

# Any global unicast address serves for the route lookup (a default route
# covers them all); this is K-root's, allocated for good. Nothing is sent.
ROUTE_PROBE = "2001:7fd::1"
# The port given to the route lookup: any will do, nothing is sent.
_PROBE_PORT = 6881

Address = tuple[str, int]


def is_v6(ip: str) -> bool:
    """``ip`` is an IPv6 address (its text has a colon)."""
    return ":" in ip


def usable(ip: str, towards: list[str]) -> str | None:
    """Why this machine cannot run a DHT node on the IPv6 address ``ip``, or None if it can.

    ``towards``: IPv6 addresses the node is to reach (its bootstrap
    routers); the first one, else ``ROUTE_PROBE``, is the route looked up.
    Never raises for a network reason; sends nothing.
    """
    target = towards[0] if towards else ROUTE_PROBE
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    except OSError as e:
        return f"no IPv6 socket on this machine: {e.strerror or e}"
    with s:
        try:
            s.bind((ip, 0))
        except OSError as e:
            return f"cannot bind a UDP socket to [{ip}]: {e.strerror or e}"
        try:
            s.connect((target, _PROBE_PORT))
            source = ipaddress.ip_address(s.getsockname()[0].split("%", 1)[0])
        except OSError as e:
            return f"no IPv6 route from [{ip}] to {target}: {e.strerror or e}"
    if ipaddress.ip_address(ip).is_unspecified and _local(source) and not _local(ipaddress.ip_address(target)):
        return f"no IPv6 address to reach {target} from (only {source})"
    return None


def _local(addr) -> bool:
    return addr.is_loopback or addr.is_link_local


def listening(listen: tuple[Address, ...], bootstrap: list[Address]) -> tuple[tuple[Address, ...], list[Address]]:
    """(the listen addresses the node can use, the bootstrap addresses of their families).

    ``listen``: ``Settings.dht_listen``; ``bootstrap``: checked ``(ip,
    port)`` pairs. IPv6 listen addresses this machine cannot use are dropped
    with one warning (``dht_ipv6_unusable``, naming why). Raises
    ``SettingsError`` when no address is left.
    """
    towards = [ip for ip, _ in bootstrap if is_v6(ip)]
    kept, dropped, why = [], [], None
    for ip, port in listen:
        reason = usable(ip, towards) if is_v6(ip) else None
        if reason is None:
            kept.append((ip, port))
        else:
            dropped.append((ip, port))
            why = why or reason
    if not kept:
        raise SettingsError(f"PEERCRAWL_DHT_LISTEN: no address this machine can listen on ({why or 'none given'})")
    families = {is_v6(ip) for ip, _ in kept}
    routers = [(ip, port) for ip, port in bootstrap if is_v6(ip) in families]
    if dropped:
        v6_left = True in families
        log.warning("dht_ipv6_unusable", reason=why, dropped=listen_text(dropped), listen=listen_text(kept),
                    bootstrap_dropped=len(bootstrap) - len(routers),
                    message="the DHT node runs on IPv4 alone" if not v6_left else "some IPv6 addresses left out")
    return tuple(kept), routers
