"""A Redis that goes away: wait with backoff, log once per outage (contract §9).

Strategy. Every process has one ``Outage`` per Redis it talks to (made by
``crawler.store.connect.connect`` and reached with ``crawler.store.patience.outage(client)``).
Every Redis call goes through it, at one of two levels:

- *inside the client*: ``store.connect`` gives redis-py a ``Retry`` whose
  ``call_with_retry`` is ``Outage.run`` (and the cluster client's commands
  and pipelines go through ``Outage.run`` too), so any command, from a
  worker loop or from ``peercrawl status``, that meets a node down, loading,
  failing over or redirecting (``transient``) waits with a growing, jittered
  pause and is sent again, for at most ``patience`` seconds
  (``PEERCRAWL_REDIS_WAIT_SECONDS``) from its first failure. Past that it
  raises ``Unavailable`` (a ``redis.ConnectionError``), which callers turn
  into one ``StoreError`` line as for any Redis error;
- *in a loop* that has more patience than a command (the worker's claim
  loop, heartbeat, lease extender, the StatHat flusher): it catches the
  ``StoreError``, reports it with ``failed(error, what)``, waits on its own
  and calls ``ok()`` after its next success.

Logging once. The outage starts at the first transient failure while none
was under way (one warning: what failed, where, the error) and ends at the
first success once no call is still waiting in ``run`` (one info line: how
long it lasted, how many calls waited, how many gave up, how many attempts
failed). Nothing is logged in between. On a cluster a failover takes down
the slots of one master while the others answer: their successes do not
end the outage while a call to the lost slots still waits.

What a resend after a lost reply does (docs/redis.md, "Failover"): every
script is safe to send twice. Recording (``record.lua``, ``visited.lua``)
checks its dedupe marks, so a second run counts nothing; a completion,
deferral, release or extension checks the lease token, so a second run
answers "stale" and changes nothing; ``add.lua`` finds the torrent tracked;
a resent claim leases more torrents and the first claim's leases, whose
reply was lost, come back when they expire (nothing lost, a little late).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import redis
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from crawler import logs
from crawler.errors import one_line

if TYPE_CHECKING:
    import gevent.event

log = logs.get("redis")

T = TypeVar("T")

# The first pause after a failure, doubling up to the cap, each drawn from
# [half, all] of it (jitter, so a hundred greenlets do not retry in step). A
# failover on the default node timeout takes seconds; 2 s keeps the wait
# after it short while a long outage costs one attempt per caller per ~1.5 s.
BACKOFF_BASE = 0.05
BACKOFF_CAP = 2.0

# What the cluster client raises (not a redis.RedisError) when no node it
# knows answers, or the answers leave slots uncovered: a cluster going away.
LOST_CLUSTER = ("cannot be connected", "are not covered", "not covered by the cluster")


class Unavailable(redis.ConnectionError):
    """Redis did not come back within the patience; the last error is its ``__cause__``."""


def transient(error: BaseException | None) -> bool:
    """Whether ``error`` (or what it was raised from) means Redis is away for now.

    Down, unreachable, timed out, loading (``BusyLoadingError`` is a
    ``ConnectionError``), failing over (``CLUSTERDOWN``, ``TRYAGAIN``,
    ``MASTERDOWN``, a demoted master's ``READONLY``), redirected past the
    client's patience (``MOVED``/``ASK``), or a cluster none of whose nodes
    answers. Not a wrong password, a script error or a full Redis (OOM):
    those need an operator, and waiting would hide them.
    """
    seen = 0
    while error is not None and seen < 5:
        if isinstance(error, (AuthenticationError, AuthorizationError)):
            return False
        if isinstance(error, (redis.ConnectionError, redis.TimeoutError, ClusterDownError, ClusterError,
                              TryAgainError, AskError, ReadOnlyError, SlotNotCoveredError)):
            return True
        if isinstance(error, RedisClusterException) and any(s in str(error) for s in LOST_CLUSTER):
            return True
        error, seen = error.__cause__, seen + 1
    return False


# Set while this greenlet (threading.local is per greenlet under gevent) is
# inside Outage.run: redis-py nests retries (a command's retry around the
# connect's), and only the outermost one waits.
_inside = threading.local()


def nested() -> bool:
    """Whether this greenlet is already inside ``Outage.run`` (or ``Once``)."""
    return bool(getattr(_inside, "depth", 0))


class Once:
    """``with Once():`` the Redis calls of this greenlet inside the block are tried once, not waited for.

    For reads that must answer now (``status`` asking every node, where a
    node down is the answer, not a reason to wait).
    """

    def __enter__(self):
        self._before = getattr(_inside, "depth", 0)
        _inside.depth = self._before + 1

    def __exit__(self, *exc):
        _inside.depth = self._before


class Outage:
    """One process's view of one Redis: whether it is away, and for how long.

    ``where``: the redacted URL (or data dir) named in the log lines.
    ``patience``: seconds a call waits from its first failure before giving
    up (``PEERCRAWL_REDIS_WAIT_SECONDS``). ``armed``: False until the first
    contact succeeded (``store.connect`` arms it), so a wrong ``REDIS_URL``
    fails at once instead of after ``patience``. ``sleep(seconds)``: how a
    waiting call pauses (default ``time.sleep``, looked up at each pause so
    gevent's patch applies whenever it came).
    """

    def __init__(self, where: str = "redis", patience: float = 60.0, *, armed: bool = True,
                 sleep: Callable[[float], None] | None = None):
        self.where, self.patience, self.armed = where, patience, armed
        self._sleep = sleep
        self.since: float | None = None  # monotonic start of the outage under way
        self.started_at: float | None = None  # its wall-clock start, for status
        self.outages = 0  # outages since the process started
        self._waiting = 0  # calls inside run() that met a failure and have not ended
        self._reset_counts()

    def _reset_counts(self) -> None:
        self.waited = 0  # calls that waited during this outage
        self.gave_up = 0  # calls that ran out of patience
        self.attempts = 0  # failed attempts
        self.what: str | None = None  # what failed first

    @property
    def down(self) -> bool:
        """Whether an outage is under way."""
        return self.since is not None

    # --- reporting ----------------------------------------------------------
    def failed(self, error: BaseException, what: str = "redis") -> bool:
        """Note a failed Redis operation; True when ``error`` is an outage (``transient``).

        The first one while Redis was up logs ``redis_unavailable``; later
        ones only count. A caller whose error is not transient (False)
        reports it its own way.
        """
        if not transient(error):
            return False
        self.attempts += 1
        if self.since is None:
            self.since, self.started_at = time.monotonic(), time.time()
            self.outages += 1
            self.what = what
            log.warning("redis_unavailable", what=what, redis=self.where, error=one_line(str(error)),
                        note="waiting for Redis to come back; logged once per outage")
        return True

    def ok(self) -> None:
        """Note a successful Redis operation: ends the outage unless a call still waits."""
        if self.since is None or self._waiting:
            return
        log.info("redis_back", redis=self.where, seconds=round(time.monotonic() - self.since, 2),
                 what=self.what, waited=self.waited, gave_up=self.gave_up, failed_attempts=self.attempts)
        self.since = self.started_at = None
        self._reset_counts()

    def figures(self) -> dict:
        """For a heartbeat or ``status``: ``redis_down_s`` (None when up) and ``redis_outages``."""
        down = None if self.since is None else round(time.monotonic() - self.since, 1)
        return {"redis_down_s": down, "redis_outages": self.outages}

    # --- waiting ---------------------------------------------------------------
    def run(self, do: Callable[[], T], what: str = "redis", *, stop: threading.Event | gevent.event.Event | None = None,
            patience: float | None = None, on_failure: Callable[[BaseException, int], None] | None = None,
            retryable: Callable[[BaseException], bool] = transient) -> T:
        """``do()``, sent again after each ``retryable`` failure until it succeeds; its value.

        Waits ``BACKOFF_BASE`` doubling to ``BACKOFF_CAP`` (jittered) between
        attempts, reporting each failure (``failed``) and the success
        (``ok``). ``on_failure(error, n)``: called after the n-th failure,
        before the pause (redis-py's hook to drop the broken connection).
        Raises a non-retryable error at once; ``Unavailable`` from the last
        error after ``patience`` seconds (default ``self.patience``; None:
        no limit) or when ``stop`` is set; the error itself when not armed
        or when called inside another ``run`` of this greenlet (the outer one
        waits).
        """
        if nested() or not self.armed:
            return do()
        patience = self.patience if patience is None else patience
        _inside.depth = 1
        failures, end = 0, None
        try:
            while True:
                try:
                    value = do()
                except Exception as e:  # noqa: BLE001 - every error is classified here
                    if not retryable(e) or not self.failed(e, what):
                        raise
                    failures += 1
                    if failures == 1:
                        self._waiting += 1  # undone in the finally, however this call ends
                        self.waited += 1
                        end = None if patience is None else time.monotonic() + patience
                    if on_failure is not None:
                        on_failure(e, failures)
                    self._pause(e, failures, end, stop, patience)
                    continue
                if failures:
                    self._waiting -= 1
                    failures = 0
                if self.since is not None:
                    self.ok()
                return value
        finally:
            _inside.depth = 0
            if failures:  # ended by an exception while waiting (raised, or the greenlet killed)
                self._waiting -= 1

    def _pause(self, error: Exception, failures: int, end: float | None, stop, patience: float | None) -> None:
        """Sleep before the next attempt; raises ``Unavailable`` when the wait is over."""
        pause = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)
        stopped = stop is not None and stop.is_set()
        if stopped or (end is not None and time.monotonic() + pause > end):
            self.gave_up += 1
            waited = "before stopping" if stopped else f"within {patience:g} s"
            raise Unavailable(f"Redis did not come back {waited}: {one_line(str(error))}") from error
        if stop is not None:
            stop.wait(pause)
        else:
            (self._sleep or time.sleep)(pause)
