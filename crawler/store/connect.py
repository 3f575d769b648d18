"""Connecting to Redis: a URL from REDIS_URL, else the embedded server under the data dir.

``connect`` makes the client: redis-py's, or its cluster client when the
URL names a Redis Cluster node; either waits for a Redis that went away
(``crawler.store.patience``, through ``crawler.store.outage``). The embedded
server (no REDIS_URL) is started and stopped by ``crawler.store.embedded``.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from crawler import redis_url
from crawler.errors import StoreError
from crawler.settings import Settings
from crawler.store import embedded
from crawler.store.connection_pool import CheckedPool, checked_when_dirty
from crawler.store.outage import Outage
from crawler.store.patience import QUICK_BACKOFF, QUICK_RETRIES, PatientCluster, PatientRetry

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
        # Typed as a Redis: its callers send both clients the commands they share
        # (redis-py's cluster client is no subclass of Redis), and is_cluster tells them apart.
        return cast(redis.Redis, PatientCluster.from_url(
            url, outage=lost, retry=Retry(QUICK_BACKOFF, QUICK_RETRIES), connection_pool_class=CheckedPool,
            connection_class=checked_when_dirty(redis.Connection), max_connections=CLUSTER_NODE_CONNECTIONS,
            timeout=CONNECTION_WAIT_SECONDS, **kwargs))
    except RedisClusterException as e:
        raise redis.ConnectionError(str(e)) from e


def is_cluster(client) -> bool:
    """Whether ``client`` is redis-py's cluster client."""
    return isinstance(client, RedisCluster)
