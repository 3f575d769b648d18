"""The key of the IP fingerprints: where it comes from, and the file that holds the embedded default's.

``PEERCRAWL_SECRET`` if set; else, with the embedded Redis, a key generated
once into ``fingerprint.key`` under ``PEERCRAWL_DATA_DIR`` (owner-only, read
without following links); never in Redis, which holds the fingerprints
(contract §4): a key found there stops recording until ``peercrawl secret
--move`` takes it out.
"""

from __future__ import annotations

import hashlib
import os
import secrets as _secrets
import stat
from pathlib import Path

import redis

from crawler.errors import SettingsError
from crawler.keys import Keys

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
