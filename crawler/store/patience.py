"""Patience: redis-py's clients made to wait for a Redis that went away.

``PatientRetry`` (a single Redis's retry policy), ``PatientCluster`` (the
cluster client) and ``PatientPipeline`` (a cluster pipeline) run every
command, pipeline and connect through the process's ``Outage``, so a
Redis restarting or failing over is waited for with backoff, logged once,
and given up on only after ``PEERCRAWL_REDIS_WAIT_SECONDS``. ``outage``
finds the ``Outage`` a client was made with. They lean on redis-py
internals listed beside its bound in pyproject.toml.
"""

from __future__ import annotations

from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ReadOnlyError, RedisClusterException
from redis.retry import Retry

from crawler.store.outage import Outage, Unavailable, nested, transient

# redis-py's own quick retries where ours do not wait: the first contact
# (a wrong REDIS_URL fails in well under a second) and the cluster client's
# count of topology refreshes per attempt.
QUICK_RETRIES = 2
QUICK_BACKOFF = ExponentialWithJitterBackoff(base=0.05, cap=0.5)


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
