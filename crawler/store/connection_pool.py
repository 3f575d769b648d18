"""A Redis connection pool that polls a connection for stray data only when it may hold some.

redis-py checks, each time a connection is taken from a pool, that it holds
no unread data (a reply to a command whose caller was interrupted): a poll
of the socket per command, about a tenth of a busy worker's CPU (measured
with py-spy: bench/results/2026-11-24-bench_worker.md). ``CheckedPool`` keeps that check only where it
can matter: a connection given back while an exception was propagating (a
greenlet killed or timed out in the middle of a command) is checked on its
next use; one given back after a command completed is not. It is a
``BlockingConnectionPool``: past its connections a greenlet waits for a free
one rather than failing. A worker's single-Redis client
(``workers.connections``) and every cluster node's pool (``store``) use it.
"""

from __future__ import annotations

import sys

import redis

from crawler.store.command_packer import ArgsPacker

# One packer for every connection: it holds no state of a command.
PACKER = ArgsPacker()


class CheckedPool(redis.BlockingConnectionPool):
    """A blocking pool that notes whether each connection came back cleanly (see the module note).

    Its connections must be of a class made by ``checked_when_dirty``.
    """

    def release(self, connection) -> None:
        """Take ``connection`` back, noting whether its command ended cleanly."""
        # Called from redis-py's ``finally`` blocks: an exception on its way
        # out means the command may not have read its reply.
        connection.released_clean = sys.exc_info()[0] is None
        super().release(connection)


def checked_when_dirty(cls: type) -> type:
    """``cls`` (a redis-py connection class) whose pool-time ``can_read()`` probe is skipped
    after a clean release, and whose commands ``ArgsPacker`` packs."""

    class CheckedConnection(cls):
        released_clean = False

        def __init__(self, *args, **kwargs):
            # hiredis packs the commands as they are (crawler.store.command_packer)
            kwargs.setdefault("command_packer", PACKER)
            super().__init__(*args, **kwargs)

        def can_read(self, timeout: float = 0) -> bool:
            if timeout == 0 and self.released_clean:
                self.released_clean = False  # one skip per clean release
                return False
            return super().can_read(timeout)

    CheckedConnection.__name__ = CheckedConnection.__qualname__ = "Checked" + cls.__name__
    return CheckedConnection
