"""HTTP(S) GET for tracker announces on gevent sockets, bounded in every way.

Strategy: resolve the host ourselves, check every resolved address against
the address policy (``crawler.sources.addresses``), and connect to the
checked address (so DNS cannot swap in a private address between check and
connect). Read raw bytes until the server closes, the response is complete,
the size cap is passed (a failure: an endless body), or the deadline passes.
Follow at most ``MAX_REDIRECTS`` redirects, each re-resolved and re-checked.
Parsing is ``crawler.sources.http_codec``'s job.
"""

from __future__ import annotations

import socket as _stdsocket
import time
import urllib.parse
from typing import Callable

import gevent
from gevent import socket, ssl

from crawler.errors import PeercrawlError
from crawler.sources import addresses
from crawler.sources.http_codec import HttpReplyError, HttpResponse, body_complete, parse_response, request_bytes, split_head
from crawler.sources.udp_client import TrackerTimeout

MAX_REDIRECTS = 3
# check(ip, what) raises addresses.AddressRefused for an address not to contact.
AddressCheck = Callable[[str, str], None]
_HEAD_MAX = 64 * 1024


class HttpTrackerError(PeercrawlError):
    """The HTTP exchange failed (connection refused, TLS, too many redirects, too big)."""


def policy(allow_private: bool) -> AddressCheck:
    """The address policy of SPEC §3 as a check function (raises AddressRefused)."""
    return lambda ip, what: addresses.check(ip, allow_private, what)


def resolve(host: str, port: int, check: AddressCheck, what: str, family: int = 0) -> list[tuple]:
    """Resolved (family, sockaddr) pairs of ``host``, each passed through ``check(ip, what)``.

    Raises ``HttpTrackerError`` if the name does not resolve and
    ``addresses.AddressRefused`` if any address is refused (one refused
    address is enough to refuse the host: it would be a way to reach inside).
    """
    try:
        infos = socket.getaddrinfo(host, port, family, _stdsocket.SOCK_DGRAM)
    except (OSError, UnicodeError) as e:
        raise HttpTrackerError(f"{what}: cannot resolve {host!r}: {e}") from e
    out = []
    for fam, _, _, _, sockaddr in infos:
        if fam not in (_stdsocket.AF_INET, _stdsocket.AF_INET6):
            continue
        check(sockaddr[0], what)
        if (fam, sockaddr) not in out:
            out.append((fam, sockaddr))
    if not out:
        raise HttpTrackerError(f"{what}: {host!r} has no IPv4 or IPv6 address")
    return out


def http_get(url: str, deadline: float, max_bytes: int, check: AddressCheck) -> HttpResponse:
    """GET ``url`` and return the final 200 response after redirects.

    ``check(ip, what)`` is the address policy (``policy(allow_private)``),
    applied to every hop. Raises TrackerTimeout (deadline), HttpTrackerError
    (including a final status other than 200), AddressRefused or
    HttpReplyError; never returns a partial body.
    """
    for hop in range(MAX_REDIRECTS + 1):
        resp = _get_once(url, deadline, max_bytes, check)
        if resp.status in (301, 302, 303, 307, 308):
            location = resp.headers.get("location")
            if not location:
                raise HttpReplyError(f"redirect {resp.status} without Location")
            url = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                raise HttpTrackerError(f"redirect to a non-HTTP URL {url[:100]!r}")
            continue
        if resp.status != 200:
            raise HttpTrackerError(f"HTTP status {resp.status} from {url[:100]}")
        return resp
    raise HttpTrackerError(f"more than {MAX_REDIRECTS} redirects")


def _get_once(url: str, deadline: float, max_bytes: int, check: AddressCheck) -> HttpResponse:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpTrackerError(f"not an HTTP URL: {url[:100]!r}")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as e:
        raise HttpTrackerError(f"bad port in {url[:100]!r}") from e
    what = f"tracker {parts.scheme}://{parts.netloc}"
    targets = resolve(parts.hostname, port, check, what)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    host_header = parts.netloc.rsplit("@", 1)[-1]
    left = deadline - time.monotonic()
    if left <= 0:
        raise TrackerTimeout(f"{what}: deadline passed")
    try:
        with gevent.Timeout(left, TrackerTimeout(f"{what}: no complete reply in time")):
            return _exchange(targets[0], tls, parts.hostname, request_bytes(host_header, target), max_bytes, what)
    except (OSError, ssl.SSLError) as e:
        raise HttpTrackerError(f"{what}: {e}") from e


def _exchange(target, tls: bool, hostname: str, request: bytes, max_bytes: int, what: str) -> HttpResponse:
    family, sockaddr = target
    s = socket.socket(family, _stdsocket.SOCK_STREAM)
    try:
        s.connect(sockaddr)
        if tls:
            s = ssl.create_default_context().wrap_socket(s, server_hostname=hostname)
        s.sendall(request)
        buf = bytearray()
        head = None
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if head is None:
                head = split_head(bytes(buf))
                if head is None and len(buf) > _HEAD_MAX:
                    raise HttpReplyError(f"response head larger than {_HEAD_MAX} bytes")
            if head is not None:
                if len(buf) - head[2] > max_bytes:
                    raise HttpTrackerError(f"{what}: reply larger than {max_bytes} bytes")
                if body_complete(head[1], bytes(buf[head[2]:])):
                    break
        return parse_response(bytes(buf))
    finally:
        s.close()
