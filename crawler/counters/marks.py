"""Dedupe marks: keyed fingerprints of (metric, IP) in small bucketed hashes.

Strategy (measured on Redis 7.0, see docs/metrics.md): a key per mark costs
~97 B even for an 8-byte fingerprint (per-key and per-expiry overhead), while
a field in a small listpack-encoded hash costs ~15 B. So a mark is one field
of one of ``buckets`` hashes ``mk:<n>``:

- ``digest = blake2b(metric "\\0" packed-IP, key=secret)``; the first 4 bytes
  pick the bucket, the next 8 bytes are the field. The address itself is
  never stored, and without the secret a field cannot be tested against a
  guessed address.
- the value is the unix second the mark was made. A mark counts as present
  while ``value > now - window``: correctness never depends on deleting stale
  fields. Redis 7.0 has no per-field TTL, so ``sweep.lua`` removes stale
  fields in bounded steps to give the memory back.

Size ``buckets`` so that marks / buckets stays under Redis's
``hash-max-listpack-entries`` (default 128; ~100 fields each): the default
2**18 buckets holds ~25 million live marks compactly. Changing it remaps
every mark (IPs would count again within the window), so pick it once.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets as _secrets

import redis

from crawler.keys import Keys

DEFAULT_BUCKETS = 1 << 18


def normalize_ip(ip: str) -> bytes | None:
    """The packed form of ``ip`` (IPv4-mapped IPv6 as IPv4); None if not an IP."""
    try:
        addr = ipaddress.ip_address(ip.strip())
    except (ValueError, AttributeError):
        return None
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.packed


def load_secret(client: redis.Redis, keys: Keys, configured: str | None) -> bytes:
    """The fingerprint key: ``configured`` if set, else the one stored in Redis.

    The first process to need one stores a random secret with SET NX, so
    every worker of the namespace agrees on it.
    """
    if configured is not None:
        raw = configured.encode()
    else:
        client.set(keys.secret, _secrets.token_hex(32), nx=True)
        raw = client.get(keys.secret)
    # blake2b keys are at most 64 bytes; hashing also evens out short secrets.
    return hashlib.sha256(b"peercrawl-marks\0" + raw).digest()


class Fingerprinter:
    """Maps (metric, packed IP) to (bucket number, 8-byte field)."""

    def __init__(self, secret: bytes, buckets: int = DEFAULT_BUCKETS):
        if buckets < 1:
            raise ValueError("buckets must be at least 1")
        self.buckets = buckets
        self._base = hashlib.blake2b(key=secret, digest_size=12)

    def mark(self, metric: bytes, packed_ip: bytes) -> tuple[int, bytes]:
        """Bucket number and field of the mark of ``packed_ip`` for ``metric``."""
        h = self._base.copy()
        h.update(metric)
        h.update(b"\0")
        h.update(packed_ip)
        d = h.digest()
        return int.from_bytes(d[:4], "big") % self.buckets, d[4:]


def bucket_key(keys: Keys, n: int) -> str:
    """Key of mark bucket ``n``."""
    return keys.sub("mk", str(n))
