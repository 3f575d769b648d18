"""TLS for the https tracker tests: a throwaway CA, TLS servers on loopback.

Nothing here is committed key material: ``make_pki`` runs the ``openssl``
CLI at test time into a temporary directory and returns the paths. The
server certificate names ``tracker.test`` (tests resolve it to 127.0.0.1
through an injected resolver, so no /etc/hosts or DNS is involved) and the
IP 127.0.0.1.

- ``TlsFront``: TLS in front of a plain HTTP tracker (opentracker), so an
  https announce reaches a real tracker.
- ``StalledTls``: accepts TCP connections and never answers the TLS
  handshake.
- ``tls_server_context``: for ``tests.hostile.HostileHttpTracker(tls=...)``.
"""

from __future__ import annotations

import socket as _stdsocket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import gevent
from gevent import socket, ssl
from gevent.server import StreamServer

TRACKER_NAME = "tracker.test"


@dataclass(frozen=True)
class Pki:
    """The certificates of the TLS trackers: a trusted CA and its server pair, and a rogue pair."""
    ca: Path  # the CA certificate clients trust (PEM)
    cert: Path  # server certificate for tracker.test and 127.0.0.1, signed by ca
    key: Path
    rogue_cert: Path  # self-signed, same names: signed by nobody trusted
    rogue_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {r.stderr.strip()[-500:]}")


def make_pki(d: Path) -> Pki:
    """Generate a CA, a server certificate it signs, and a rogue self-signed one, under ``d``.

    Raises RuntimeError with openssl's message if the CLI fails.
    """
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=peercrawl throwaway test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    (d / "server.ext").write_text(
        f"subjectAltName=DNS:{TRACKER_NAME},IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={TRACKER_NAME}", cwd=d)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "2",
             "-days", "2", "-extfile", "server.ext", "-out", "server.pem", cwd=d)
    _openssl("req", "-x509", *ec, "-keyout", "rogue.key", "-out", "rogue.pem", "-days", "2",
             "-subj", f"/CN={TRACKER_NAME}", "-addext", f"subjectAltName=DNS:{TRACKER_NAME},IP:127.0.0.1", cwd=d)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "rogue.pem", d / "rogue.key")


def tls_server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A gevent server-side TLS context (gevent's, so handshakes do not block the hub)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def resolver_for(names: dict[str, list[str]]):
    """An injected resolver: each name to its list of IPs (in order); IP literals to themselves.

    Any other name fails like an unknown host, so no test ever asks real DNS.
    """

    def resolve(host: str, port: int) -> list:
        ips = names.get(host)
        if ips is None:
            try:
                fam = _family(host)
            except ValueError:
                raise OSError(f"test resolver: unknown host {host!r}") from None
            return [(fam, (host, port) if fam == _stdsocket.AF_INET else (host, port, 0, 0))]
        return [(_family(ip), (ip, port) if _family(ip) == _stdsocket.AF_INET else (ip, port, 0, 0)) for ip in ips]

    return resolve


def _family(ip: str) -> int:
    import ipaddress

    return _stdsocket.AF_INET if ipaddress.ip_address(ip).version == 4 else _stdsocket.AF_INET6


class TlsFront:
    """TLS on 127.0.0.1:``port`` in front of a plain HTTP server at 127.0.0.1:``backend_port``."""

    def __init__(self, backend_port: int, context: ssl.SSLContext):
        self.backend = ("127.0.0.1", backend_port)
        self.server = StreamServer(("127.0.0.1", 0), self._handle, ssl_context=context)
        self.server.start()
        self.port = self.server.server_port

    def _handle(self, client, addr) -> None:
        up = socket.create_connection(self.backend, timeout=5)
        up.settimeout(None)

        def forward_request() -> None:
            try:
                while True:
                    data = client.recv(65536)
                    if not data:
                        return
                    up.sendall(data)
            except OSError:
                pass

        g = gevent.spawn(forward_request)
        try:
            while True:  # the tracker closes after its reply
                data = up.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            g.kill()
            up.close()
            client.close()

    def close(self) -> None:
        self.server.stop(timeout=0.1)


class StalledTls:
    """Accepts TCP on 127.0.0.1 and never answers: a TLS handshake to it never completes."""

    def __init__(self):
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        self.port = self.server.server_port
        self.accepted = 0

    def _handle(self, sock, addr) -> None:
        self.accepted += 1
        gevent.sleep(60)  # holds the connection; stop() kills this greenlet

    def close(self) -> None:
        self.server.stop(timeout=0.1)
