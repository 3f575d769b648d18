"""Who the dashboard serves without ``PEERCRAWL_DASHBOARD_TOKEN``: this machine alone.

Without a token the door is the connection itself:

- ``check_bind`` refuses, before anything listens, a ``--host`` that is not
  loopback (127.0.0.0/8 or ::1; ``0.0.0.0``, ``::`` and ``""`` are every
  interface, a name must resolve to loopback addresses only);
- ``refusal`` refuses a request whose peer address is not loopback. The
  peer address is the socket's, which gevent's WSGI server writes into
  ``REMOTE_ADDR``; no header is read for it (not ``Host``, not
  ``X-Forwarded-For``), so nothing a client sends can change it. An
  IPv4-mapped ``::ffff:127.x.y.z`` is the IPv4 address it maps.
- A request from loopback must also name the dashboard by a loopback
  address or ``localhost`` in its ``Host`` header, when it sends one: a web
  page elsewhere whose DNS name is rebound to 127.0.0.1 makes the browser
  connect from loopback, but with that name as ``Host``. ``Host`` only ever
  narrows the door; it never opens it.

With a token every request must carry it (``crawler.dashboard.app``) and
none of this applies: the token is what the door checks.
"""

from __future__ import annotations

import ipaddress
import socket

from crawler.errors import SettingsError

LOOPBACK_NAME = "localhost"


def is_loopback(address: str) -> bool:
    """True when ``address`` is an IP literal in 127.0.0.0/8 or ::1 (or IPv4-mapped 127/8);
    False for any other address, a name, or text that is no address at all."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) names no other host
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def check_bind(host: str, token: str | None, flag: str = "--host") -> None:
    """Nothing when the dashboard may listen on ``host`` (``flag`` names the option it came from).

    With a token any host is allowed. Without one, ``host`` must be a
    loopback address or a name whose every address is loopback. Raises
    ``SettingsError`` (one line naming PEERCRAWL_DASHBOARD_TOKEN) otherwise.
    """
    if token is not None:
        return
    need = "serving beyond loopback needs PEERCRAWL_DASHBOARD_TOKEN"
    if not host.strip():
        raise SettingsError(f"{flag} '' listens on every interface: {need}")
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
                 if isinstance(info[4][0], str)}  # an IP address's text (the only form TCP lookups give)
    except (OSError, UnicodeError) as e:
        raise SettingsError(f"{flag} {host!r}: cannot resolve it ({e}); {need}") from None
    outside = sorted(a for a in found if not is_loopback(a))
    if outside or not found:
        shown = host if outside == [host] else f"{host} ({', '.join(outside)})"
        raise SettingsError(f"{flag} {shown} is not a loopback address (127.0.0.0/8 or ::1): {need}")


def refusal(peer: str | None, host_header: str | None) -> str | None:
    """Why a token-less dashboard refuses a request, or None to serve it.

    ``peer``: the connection's peer address (WSGI ``REMOTE_ADDR``);
    ``host_header``: the request's ``Host`` header, None when it sent none.
    """
    if not is_loopback(peer or ""):
        return ("without PEERCRAWL_DASHBOARD_TOKEN the dashboard serves this machine alone: "
                "the connection does not come from a loopback address")
    if host_header is not None and not _loopback_host(host_header):
        return ("without PEERCRAWL_DASHBOARD_TOKEN only requests addressed to localhost or a loopback "
                "address are served")
    return None


def _loopback_host(header: str) -> bool:
    """True when a ``Host`` header (``name``, ``name:port``, ``[v6]:port``) names ``localhost`` or a
    loopback address."""
    h = header.strip()
    if h.startswith("["):
        end = h.find("]")
        name = h[1:end] if end > 0 else ""
    else:
        name = h.rsplit(":", 1)[0] if h.count(":") == 1 else h
    return name.lower() == LOOPBACK_NAME or is_loopback(name)
