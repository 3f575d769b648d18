"""Connecting to Redis: a URL from REDIS_URL, else the embedded server under the data dir.

``connect`` makes the client: redis-py's, or its cluster client when the
URL names a Redis Cluster node; either waits for a Redis that went away
(``PatientRetry``, ``PatientCluster``: ``crawler.store.outage``). The embedded
server (no REDIS_URL) is started and stopped by ``crawler.store.embedded``.
"""

from __future__ import annotations

from pathlib import Path

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ReadOnlyError, RedisClusterException
from redis.retry import Retry

from crawler import redis_url
from crawler.errors import StoreError, one_line
from crawler.settings import Settings
from crawler.store import embedded
from crawler.store.connection_pool import CheckedPool, checked_when_dirty
from crawler.store.outage import Outage, Unavailable, nested, once, transient

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

def connect(settings: Settings, **kwargs) -> redis.Redis:
    """A redis-py client for ``settings``; raises ``StoreError`` if unreachable.

    Responses are bytes (``decode_responses`` off) so that binary values and
    non-UTF-8 names survive; callers decode what they show.

    The first contact (a PING) is tried quickly: an unreachable Redis fails
    at once with one line. After it, every command that finds Redis away
    waits for it up to ``settings.redis_wait_seconds`` (``crawler.store.outage``),
    logging once per outage; ``outage(client)`` is that process's record.
    """
    url = settings.redis_url
    where = redis_url.shown(url) if url else str(settings.data_dir)
    lost = Outage(where, settings.redis_wait_seconds, armed=False)
    kwargs = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT,
              "health_check_interval": HEALTH_CHECK_SECONDS, **kwargs}
    try:
        if url:
            if not url.startswith("unix://"):  # a TCP option: redis-py's unix socket connection refuses it
                kwargs.setdefault("socket_keepalive", True)
            client = _remote(url, lost, **kwargs)
        else:
            client = embedded.client(Path(settings.data_dir), retry=PatientRetry(lost), **kwargs)
        client.ping()
        lost.armed = True
    except redis.RedisError as e:
        raise StoreError(f"Redis at {where} is not reachable: {redis_url.hide(str(e), url)}") from None
    except ValueError as e:  # what from_url raises for a URL it cannot use
        raise StoreError(f"REDIS_URL: {redis_url.hide(str(e), url)} (got {where})") from None
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
    twice (``crawler.store.outage``); read-only MULTI blocks are too.
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
        # stray data after a clean release (crawler.store.connection_pool; a rediss:// URL's
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
