"""HTTP(S) GET for tracker announces on gevent sockets, bounded in every way.

Strategy: resolve the host ourselves, check every resolved address against
the address policy (``crawler.sources.addresses``), and connect to a checked
address (so DNS cannot swap in a private address between check and connect).
A host with several addresses is tried address after address until one
accepts the connection, each connect given an equal share of the time left
(``addresses.share_of_time``); once connected, that address is the tracker.
For ``https`` the connection is wrapped in TLS and the certificate verified
against the default trust store plus ``Settings.tracker_ca_file``
(``tls_context``); a certificate that does not verify, or a handshake that
fails, is a ``TrackerTlsError``. Read bytes into the codec's
``ResponseReader`` (h11 framing) until it has the whole response, the body
passes the size cap (a failure: an endless body), or the deadline passes
(the handshake included). Follow at most ``MAX_REDIRECTS`` redirects, each
re-resolved and re-checked. Framing and parsing are
``crawler.sources.trackers.http_codec``'s job.
"""

from __future__ import annotations

import re
import socket as _stdsocket
import ssl as _stdssl
import time
import urllib.parse
from pathlib import Path

import gevent
from gevent import socket, ssl

from crawler.errors import PeercrawlError, SettingsError
from crawler.sources import addresses
from crawler.sources.addresses import AddressCheck, Resolver, first, resolve
from crawler.sources.lru import Lru
from crawler.sources.trackers.http_codec import HttpResponse, ResponseReader
from crawler.sources.trackers.tracker_errors import HttpReplyError, HttpRequestError, ReplyTooLarge, TrackerTimeout

MAX_REDIRECTS = 3
CA_FILE_SETTING = "PEERCRAWL_TRACKER_CA_FILE"


class HttpTrackerError(PeercrawlError):
    """The HTTP exchange failed (connection refused, TLS, too many redirects, too big)."""


class HttpStatusError(HttpTrackerError):
    """The final response's status is not 200; ``status`` is it."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class TrackerTlsError(HttpTrackerError):
    """TLS with an https tracker failed: its certificate does not verify, or the handshake failed."""


def tls_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """A client TLS context: certificates and host names verified against the default trust store.

    ``ca_file`` (PEM, ``Settings.tracker_ca_file``) adds certificates to trust
    on top of the default store (OpenSSL's, which also honours the
    ``SSL_CERT_FILE`` variable). Raises ``SettingsError`` naming
    ``PEERCRAWL_TRACKER_CA_FILE`` if the file cannot be loaded.
    """
    # gevent's SSLContext, built by hand: ssl.create_default_context (gevent
    # re-exports the stdlib's) makes a stdlib context whose sockets block the
    # hub unless the process is monkey-patched, so a stalled handshake would
    # stall every greenlet. These are create_default_context's client settings.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = True
    ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=str(ca_file))
        except (OSError, _stdssl.SSLError) as e:
            raise SettingsError(f"{CA_FILE_SETTING}: cannot load CA certificates from {ca_file}: {e}") from None
    return ctx


_default_tls: ssl.SSLContext | None = None


def _default_context() -> ssl.SSLContext:
    global _default_tls
    if _default_tls is None:
        _default_tls = tls_context()
    return _default_tls


def http_get(
    url: str,
    deadline: float,
    max_bytes: int,
    check: AddressCheck,
    tls: ssl.SSLContext | None = None,
    resolver: Resolver | None = None,
    preferred: Lru | None = None,
) -> HttpResponse:
    """GET ``url`` and return the final 200 response after redirects.

    ``check(ip, what)`` is the address policy (``policy(allow_private)``),
    applied to every address of every hop; ``tls`` the context for https
    (default: ``tls_context()``); ``resolver`` replaces the system resolver;
    ``preferred`` maps ("tcp", host, port) to the address that last accepted a
    connection, tried first and updated here (shared with the UDP side by
    ``Trackers``).
    Raises TrackerTimeout (deadline), HttpTrackerError (including
    TrackerTlsError and a final status other than 200), AddressRefused,
    HostUnresolved or HttpReplyError; never returns a partial body.
    """
    for _hop in range(MAX_REDIRECTS + 1):
        resp = _get_once(url, deadline, max_bytes, check, tls, resolver, preferred)
        if resp.status in (301, 302, 303, 307, 308):
            location = resp.headers.get("location")
            if not location:
                raise HttpReplyError(f"redirect {resp.status} without Location")
            try:
                url = urllib.parse.urljoin(url, location)
                scheme = urllib.parse.urlsplit(url).scheme
            except ValueError as e:  # "http://[::1": brackets that do not close
                raise HttpReplyError(f"bad Location {location[:100]!r}: {e}") from None
            if scheme not in ("http", "https"):
                raise HttpTrackerError(f"redirect to a non-HTTP URL {url[:100]!r}")
            continue
        if resp.status != 200:
            raise HttpStatusError(f"HTTP status {resp.status} from {url[:100]}", resp.status)
        return resp
    raise HttpTrackerError(f"more than {MAX_REDIRECTS} redirects")


def _get_once(url, deadline, max_bytes, check, tls, resolver, preferred) -> HttpResponse:
    parts, port, what = _split(url)
    assert parts.hostname is not None  # _split refuses a URL without a host
    targets = resolve(parts.hostname, port, check, what, resolver)
    key = ("tcp", parts.hostname, port)
    if preferred is not None and len(targets) > 1:
        targets = first(targets, preferred.get(key))
    reader = _reader(parts, max_bytes, what)
    left = deadline - time.monotonic()
    if left <= 0:
        raise TrackerTimeout(f"{what}: deadline passed")
    with gevent.Timeout(left, TrackerTimeout(f"{what}: no complete reply in time")):
        s, chosen = _connect(targets, deadline, what)
        if preferred is not None and len(targets) > 1:
            preferred[key] = chosen
        try:
            if parts.scheme == "https":
                s = _handshake(s, tls or _default_context(), parts.hostname, what)
            return _exchange(s, reader, what)
        except _stdssl.SSLError as e:
            raise TrackerTlsError(f"{what}: TLS error: {_ssl_text(e)}") from e
        except OSError as e:
            raise HttpTrackerError(f"{what}: {e}") from e
        finally:
            s.close()

def _split(url: str) -> tuple[urllib.parse.SplitResult, int, str]:
    """``url``'s parts, port, and the name errors give it; raises ``HttpTrackerError``."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:
        raise HttpTrackerError(f"not an HTTP URL: {url[:100]!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpTrackerError(f"not an HTTP URL: {url[:100]!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise HttpTrackerError(f"bad port in {url[:100]!r}") from e
    return parts, port, f"tracker {parts.scheme}://{parts.netloc}"


def _reader(parts: urllib.parse.SplitResult, max_bytes: int, what: str) -> ResponseReader:
    """The GET of ``parts``' path and query, framed by h11; raises ``HttpTrackerError``."""
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    # A URL from a magnet or a .torrent may hold any character; the request
    # line and Host header hold ASCII only (and a space would end the target).
    target = _UNSAFE.sub(lambda m: urllib.parse.quote(m.group(), safe=""), target)
    try:
        host_header = _ascii_host(parts.netloc.rsplit("@", 1)[-1])
    except UnicodeError as e:
        raise HttpTrackerError(f"{what}: host name cannot be encoded: {e}") from None
    try:
        return ResponseReader(host_header, target, max_bytes)
    except HttpRequestError as e:
        raise HttpTrackerError(f"{what}: {e}") from None


_UNSAFE = re.compile(r"[^\x21-\x7e]")


def _ascii_host(netloc: str) -> str:
    """``netloc`` (no userinfo) for the Host header: a non-ASCII name IDNA-encoded; raises UnicodeError."""
    if netloc.isascii():
        return netloc
    host, sep, port = netloc.rpartition(":")
    if not sep or not port.isdigit() or not port.isascii():
        host, sep, port = netloc, "", ""
    return host.encode("idna").decode("ascii") + sep + port


def _connect(targets: list, deadline: float, what: str) -> tuple[socket.socket, tuple]:
    """(socket, target) of the first of ``targets`` that accepts, each tried for its share of the time."""
    errors = []
    for i, (family, sockaddr) in enumerate(targets):
        now = time.monotonic()
        s = socket.socket(family, _stdsocket.SOCK_STREAM)
        s.settimeout(max(0.001, addresses.share_of_time(deadline, now, len(targets) - i) - now))
        try:
            s.connect(sockaddr)
        except OSError as e:
            s.close()
            errors.append(f"{sockaddr[0]} port {sockaddr[1]}: {e or type(e).__name__}")
            continue
        s.settimeout(None)  # from here the caller's deadline bounds the exchange
        return s, (family, sockaddr)
    if len(errors) == 1:
        raise HttpTrackerError(f"{what}: {errors[0]}")
    raise HttpTrackerError(f"{what}: none of its {len(errors)} addresses accepted a connection: " + "; ".join(errors))


def _handshake(s: socket.socket, ctx: ssl.SSLContext, hostname: str, what: str) -> socket.socket:
    try:
        return ctx.wrap_socket(s, server_hostname=hostname)
    except _stdssl.SSLCertVerificationError as e:
        raise TrackerTlsError(
            f"{what}: certificate does not verify ({e.verify_message}); "
            f"a private CA can be trusted with {CA_FILE_SETTING}"
        ) from e
    except _stdssl.SSLError as e:
        raise TrackerTlsError(f"{what}: TLS handshake failed: {_ssl_text(e)}") from e
    except OSError as e:
        raise TrackerTlsError(f"{what}: TLS handshake failed: {e or type(e).__name__}") from e


def _ssl_text(e: _stdssl.SSLError) -> str:
    """OpenSSL's message without the C source location: "[SSL: WRONG_VERSION_NUMBER] wrong version number"."""
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(e)) or type(e).__name__


def _exchange(s, reader: ResponseReader, what: str) -> HttpResponse:
    """Send the request and feed what arrives to ``reader`` until it has the whole response."""
    s.sendall(reader.request)
    try:
        while True:
            chunk = s.recv(65536)
            response = reader.feed(chunk)
            if response is not None:
                return response
            if not chunk:  # the reader raises on a close before the end; this is only a guard
                raise HttpReplyError("connection closed before the response was whole")
    except ReplyTooLarge as e:
        raise HttpTrackerError(f"{what}: {e}") from None
