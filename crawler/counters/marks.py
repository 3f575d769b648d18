"""Dedupe marks: keyed fingerprints of (metric, IP) packed into bucket strings.

Strategy (measured on Redis 7.0, see docs/metrics.md): a key per mark costs
~97 B even for an 8-byte fingerprint (per-key and per-expiry overhead); a
field of a small listpack hash ~15-18 B, but each lookup scans the listpack
(~2.5 µs per field at 100 fields). So a mark is one 12-byte record of one of
``buckets`` strings ``mk:<n>``: ~13 B per mark, and a lookup is one memmem
over ~1.2 KB inside Redis.

- keyed fingerprints (``Fingerprinter``): an IP's marks for a torrent (and
  its group record, see record.lua) live in the bucket of (IP, torrent), its
  place marks in the bucket of the IP alone, so a peer in thousands of swarms
  does not grow one bucket; the record's first 8 bytes are 64 bits of the
  IP's fingerprint XOR the metric's. The address itself is never stored.
- the record's last 4 bytes are the unix second the mark was made (big
  endian). A mark counts as present while ``time > now - window``:
  correctness never depends on deleting stale records. ``sweep.lua`` removes
  them in bounded steps to give the memory back.

Size ``buckets`` so that buckets stay around 100 records (~1.2 KB): the
default 2**18 buckets suit ~25 million live marks; beyond that buckets just
grow longer (lookups stay correct, a little slower). Changing it remaps every
mark (IPs would count again within the window), so pick it once.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets as _secrets
import socket
import stat
from pathlib import Path

import redis

from crawler.errors import SettingsError
from crawler.keys import Keys

DEFAULT_BUCKETS = 1 << 18


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


# The embedded default's generated key, under PEERCRAWL_DATA_DIR (contract §4).
KEY_FILE = "fingerprint.key"
MAKE_ONE = "python -c 'import secrets; print(secrets.token_hex(32))'"


def load_secret(client: redis.Redis, keys: Keys, settings) -> bytes:
    """The fingerprint key (contract §4; threat model in docs/operations.md); it never lives in Redis.

    ``PEERCRAWL_SECRET`` if set; else, with ``REDIS_URL``, a ``SettingsError``
    saying how to make one; else (the embedded default) the key in
    ``<data_dir>/fingerprint.key``, generated into a new owner-only file on
    first use. While the namespace holds a key in Redis
    (``{ns}:secret``), refuses with how to move it out
    (``peercrawl secret --move``): a new key would count every IP again.
    Raises ``redis.RedisError`` if Redis fails.
    """
    if client.exists(keys.secret):
        raise SettingsError(
            f"the key of the IP fingerprints is stored in Redis ({keys.secret}), where any dump of it "
            "can reverse every mark; run `peercrawl secret --move` once to move it out (its marks stay "
            "valid), then start again")
    if settings.secret is not None:
        raw = settings.secret.encode()
    elif settings.redis_url:
        raise SettingsError(
            "PEERCRAWL_SECRET is unset: with REDIS_URL the key of the IP fingerprints must come from the "
            f"environment, never from Redis; make one with {MAKE_ONE} and give every worker the same")
    else:
        path = key_file(settings.data_dir)
        raw = read_key_file(path)
        if raw is None:
            try:
                create_key_file(path, _secrets.token_hex(32))
            except OSError as e:
                raise SettingsError(f"PEERCRAWL_DATA_DIR: cannot create the fingerprint key file {path}: "
                                    f"{e.strerror or e}") from None
            raw = read_key_file(path)
    return derive_key(raw)


def derive_key(raw: bytes) -> bytes:
    """The 32-byte BLAKE2b key made from a configured, stored or file key."""
    # blake2b keys are at most 64 bytes; hashing also evens out short secrets.
    return hashlib.sha256(b"peercrawl-marks\0" + raw).digest()


def key_file(data_dir: Path) -> Path:
    """Where the embedded default keeps its generated key."""
    return Path(data_dir) / KEY_FILE


def read_key_file(path: Path) -> bytes | None:
    """The key in ``path``, None if there is no such file.

    Raises ``SettingsError`` (one line) for a file anyone but its owner (this
    user) could read, one that is not a regular file, or one holding no key.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SettingsError(f"PEERCRAWL_DATA_DIR: cannot read the fingerprint key file {path}: "
                            f"{e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SettingsError(f"PEERCRAWL_DATA_DIR: the fingerprint key file {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise SettingsError(f"PEERCRAWL_DATA_DIR: the fingerprint key file {path} belongs to uid "
                                f"{st.st_uid}, not to this user; it must be its owner's alone")
        if st.st_mode & 0o077:
            raise SettingsError(f"PEERCRAWL_DATA_DIR: the fingerprint key file {path} can be read by others "
                                f"(mode {stat.S_IMODE(st.st_mode):04o}); run chmod 600 {path}")
        raw = f.read(4097).strip()
    if not 16 <= len(raw) <= 4096:
        raise SettingsError(f"PEERCRAWL_DATA_DIR: the fingerprint key file {path} holds no key "
                            "(16 to 4096 characters expected)")
    return raw


def create_key_file(path: Path, key: str) -> bool:
    """Write ``key`` to a new owner-only (0600) ``path``; False if it already existed.

    Atomic: the key is written and synced to a private temporary file, then
    hard-linked to ``path``, so no process ever reads a partial key, and of
    processes racing to create it exactly one wins (the others read its key).
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            os.write(fd, key.encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


class Fingerprinter:
    """Keyed 64-bit fingerprints of IPs, torrents and place metrics.

    A mark's field is ``low64(ip) XOR metric``, its bucket ``(high64(ip)
    XOR torrent(h)) mod buckets`` for a torrent's metric and ``high64(ip)
    mod buckets`` for a place metric. The metric part is composed so that Python hashes
    once per IP, once per torrent per visit and once per place per process:

    - ``torrents.<h>.users``: ``torrent(h)``;
    - a global place metric (``countries.C.users``, ``countries.C.cities.Y.users``,
      ...): ``place(name)``;
    - a torrent's place metric (``torrents.<h>.countries.C...``):
      ``torrent(h) XOR place("t" + name without the torrent)``.

    Every part is a BLAKE2b digest keyed with the secret (distinct
    personalisations), so two different (metric, IP) pairs of one bucket
    share a field only by a 2**-64 accident, and without the secret a field
    cannot be tested against a guessed address.
    """

    def __init__(self, secret: bytes, buckets: int = DEFAULT_BUCKETS):
        if buckets < 1:
            raise ValueError("buckets must be at least 1")
        self.buckets = buckets
        self._ip = hashlib.blake2b(key=secret, digest_size=16, person=b"peercrawl-ip")
        self._torrent = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-t")
        self._place = hashlib.blake2b(key=secret, digest_size=8, person=b"peercrawl-place")

    def ip(self, packed_ip: bytes) -> int:
        """128-bit keyed fingerprint of one packed IP (high half: bucket, low half: field)."""
        h = self._ip.copy()
        h.update(packed_ip)
        return int.from_bytes(h.digest(), "big")

    def ip_hasher(self):
        """The keyed BLAKE2b state ``ip`` copies: ``copy()``, ``update(packed_ip)``, ``digest()``
        (for loops that inline ``ip``)."""
        return self._ip

    def torrent(self, info_hash: str) -> int:
        """64-bit keyed fingerprint of a lower-case hex info-hash."""
        h = self._torrent.copy()
        h.update(info_hash.encode())
        return int.from_bytes(h.digest(), "big")

    def place(self, name: str) -> int:
        """64-bit keyed fingerprint of a place metric's name (escaped parts, no torrent)."""
        h = self._place.copy()
        h.update(name.encode("utf-8"))
        return int.from_bytes(h.digest(), "big")



RECORD = 12  # bytes per mark: 8-byte field, u32 unix second


def parse_bucket(raw: bytes) -> list[tuple[bytes, int]]:
    """The ``(field, unix second)`` records of one mark bucket's value."""
    if len(raw) % RECORD:
        raise ValueError(f"mark bucket of {len(raw)} bytes is not a whole number of {RECORD}-byte records")
    return [(raw[i : i + 8], int.from_bytes(raw[i + 8 : i + RECORD], "big")) for i in range(0, len(raw), RECORD)]
