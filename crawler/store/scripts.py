"""Lua scripts kept as files, loaded once and called by SHA.

Each ``.lua`` file starts with a header listing its KEYS and ARGV. Every key a
script touches arrives through KEYS (never built inside Lua), so the scripts
run on Redis Cluster.
"""

from __future__ import annotations

import time
from functools import cache
from importlib import resources

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, ClusterDownError, MovedError, NoScriptError, TryAgainError

from crawler import logs
from crawler.store.outage import transient

log = logs.get("redis")

# A line ``--! include NAME`` is replaced by the text of NAME.lua from the
# including script's package, or else from this package (``slices.lua``, the
# helpers every room's scripts share): each helper has one home, and each
# script still reaches Redis as one self-contained text.
INCLUDE = "--! include "


@cache
def source(name: str, package: str) -> str:
    """The text of ``<name>.lua`` in ``package`` (or this one), its includes inlined."""
    here = resources.files(package).joinpath(name + ".lua")
    if not here.is_file():
        here = resources.files(__package__).joinpath(name + ".lua")
    lines = here.read_text("utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith(INCLUDE):
            lines[i] = source(line[len(INCLUDE):].split()[0], package).rstrip("\n")
    return "\n".join(lines)


def register(client: redis.Redis, name: str, package: str) -> Script:
    """A redis-py Script for ``package``'s ``name``: EVALSHA, loading the script on NOSCRIPT.

    On a cluster client, a ``ClusterScript``.
    """
    if isinstance(client, RedisCluster):
        return ClusterScript(client, source(name, package))
    return client.register_script(source(name, package))


class ClusterScript(Script):
    """A script of a cluster client, called like any redis-py Script, sent as ``run_pipelined`` sends it.

    That is, to the master of its first key's slot, in a pipeline of that
    node's own client: redis-py's cluster command path (the slot of every
    key, node selection, its retry loop) cost a worker twice the CPU per
    call (220 µs against 116 µs for a call of 50 keys, measured on one
    loopback master), and it now waits and follows redirections as
    ``_cluster_run`` does. Calls with no key, or given a ``client`` (a
    pipeline), go redis-py's way.
    """

    def __call__(self, keys=None, args=None, client=None):
        """The script's reply for ``keys`` and ``args`` (see the class note)."""
        if client is not None or not keys:
            return super().__call__(keys, args, client)
        return _cluster_run(self.registered_client, [(self, list(keys), list(args or ()))], None)[0]


class Wait:
    """Replicas that must acknowledge the writes of a ``run_pipelined`` batch (Redis ``WAIT``).

    Replication is asynchronous: a master acknowledges a script before any
    replica has it, and a failover promotes a replica that may not. With a
    ``Wait``, each batch ends with ``WAIT replicas timeout_ms`` on the same
    connection as its scripts (WAIT covers the writes of its own
    connection), so it returns once ``replicas`` replicas have every write of
    the batch, or after ``timeout_ms``. A batch acknowledged by fewer is not
    undone (the master keeps it): it counts in ``short`` and is logged at
    most once a minute, and the crawl goes on. Build it with
    ``from_settings`` (None when ``PEERCRAWL_WAIT_REPLICAS`` is 0).
    """

    LOG_EVERY = 60.0

    def __init__(self, replicas: int, timeout_ms: int):
        self.replicas, self.timeout_ms = replicas, timeout_ms
        self.batches = 0  # batches that sent a WAIT
        self.short = 0  # of them, acknowledged by fewer than ``replicas`` (or not waited for)
        self._logged = float("-inf")

    @classmethod
    def from_settings(cls, settings) -> "Wait | None":
        """``PEERCRAWL_WAIT_REPLICAS`` and ``PEERCRAWL_WAIT_TIMEOUT_MS``; None when off."""
        return cls(settings.wait_replicas, settings.wait_timeout_ms) if settings.wait_replicas else None

    def note(self, acked, node: str = "redis") -> None:
        """Count one batch's WAIT reply (the replicas that acknowledged, or the error it got)."""
        self.batches += 1
        if isinstance(acked, int) and acked >= self.replicas:
            return
        self.short += 1
        now = time.monotonic()
        if now - self._logged >= self.LOG_EVERY:
            self._logged = now
            log.warning("replicas_behind", node=node, wanted=self.replicas, acknowledged=str(acked),
                        short=self.short, batches=self.batches,
                        note="recordings not yet on enough replicas are kept; a failover now could lose them")


def run_pipelined(client: redis.Redis, calls: list, wait: Wait | None = None) -> list:
    """Run ``(script, keys, args)`` calls in one round trip; their replies in order.

    EVALSHA goes into the pipeline as is: redis-py's own pipelined scripts
    would first ask SCRIPT EXISTS, a second round trip every time. A call
    answered NOSCRIPT (Redis restarted, flushed its scripts, or a promoted
    replica) did nothing; it alone is run again through its Script, which
    loads it. A call that met a node away (a cluster pipeline keeps going
    for the others) is sent again alone through the client, which waits for
    the node (``crawler.store.outage``; every script is safe to run twice). Each
    call is its own atomic step.

    On a cluster the calls go in one pipeline per node, each through that
    node's own client (``_cluster_run``).

    ``wait``: a ``Wait``; the batch returns once that many replicas have its
    writes (or its timeout passed), one round trip more per node. Raises
    ``redis.RedisError`` (a script's error reply: the first of them, after
    every call ran).

    A client with a ``Coalescer`` (a worker process's, ``coalesce``) sends
    the calls in a round trip shared with other greenlets' calls. A single
    call without ``wait`` on one Redis is sent as the script's own call,
    without a pipeline (the same round trip, less client work).
    """
    shared = getattr(client, "coalescer", None)
    replies = shared.run(calls, wait) if shared is not None else replies_of(client, calls, wait)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def replies_of(client: redis.Redis, calls: list, wait: Wait | None = None) -> list:
    """``run_pipelined``'s round trip, now: each call's reply, or the error it got as a value.

    Raises ``redis.RedisError`` only for what failed the round trip itself
    (connection, outage past its patience).
    """
    if isinstance(client, RedisCluster):
        return _cluster_run(client, calls, wait, raise_on_error=False)
    if wait is not None:
        return _on_node(client, calls, wait, raise_on_error=False)
    if len(calls) == 1:
        script, keys, args = calls[0]
        try:
            return [script(keys=keys, args=args)]
        except redis.ResponseError as e:
            return [e]
    pipe = client.pipeline(transaction=False)
    for script, keys, args in calls:
        # As a raw command: redis-py's cluster pipeline refuses its evalsha
        # method but routes the command by its first key like any other.
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    replies = pipe.execute(raise_on_error=False)
    for i, (script, keys, args) in enumerate(calls):
        if isinstance(replies[i], NoScriptError) or (isinstance(replies[i], Exception) and transient(replies[i])):
            try:
                replies[i] = script(keys=keys, args=args)
            except redis.ResponseError as e:
                replies[i] = e
    return replies


def _on_node(node: redis.Redis, calls: list, wait: Wait | None, raise_on_error: bool = True) -> list:
    """``calls`` (then ``WAIT``, with ``wait``) in one pipeline on ``node`` (one Redis server); their replies.

    Scripts the node does not have are loaded on it and their calls sent
    again (with a WAIT of their own). With ``raise_on_error`` False, a
    reply that is an error is returned as such (the cluster path sorts them).
    """
    replies: list = [None] * len(calls)
    todo = list(range(len(calls)))
    for _ in range(2):
        pipe = node.pipeline(transaction=False)
        for i in todo:
            script, keys, args = calls[i]
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        if wait is not None:
            pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
        out = pipe.execute(raise_on_error=False)
        missing = []
        for i, reply in zip(todo, out):
            if isinstance(reply, NoScriptError):
                missing.append(i)
            replies[i] = reply
        if wait is not None and len(missing) < len(todo):  # a pass of NOSCRIPTs alone wrote nothing
            wait.note(out[-1], _name(node))
        if not missing:
            break
        for script in {calls[i][0] for i in missing}:
            node.script_load(script.script)
        todo = missing
    if raise_on_error:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _name(node: redis.Redis) -> str:
    kw = node.get_connection_kwargs()
    return f"{kw.get('host', '')}:{kw.get('port', '')}" if "host" in kw else "redis"


# Replies that mean "not this node, or not now": the call did nothing, the
# slot map is refreshed and the call sent again.
_ELSEWHERE = (AskError, TryAgainError, ClusterDownError)


def _cluster_run(client: RedisCluster, calls: list, wait: Wait | None, raise_on_error: bool = True) -> list:
    """``_on_node`` on the master serving each call's first key: one pipeline per node.

    Not redis-py's cluster pipeline, for three reasons: it asks the default
    node ``COMMAND GETKEYS`` for every EVALSHA it routes (a round trip per
    call), it stalls for good once that default node is down, and it could
    not carry a WAIT (that must go on the connection of the writes). So the
    calls are grouped by the master of their slot as the client's slot map
    says, and each group goes through that node's own client, one node
    after the other. A node away or a slot moved (``MOVED``, a failover)
    refreshes the slot map, and the calls not yet answered go again after a
    pause, through the client's ``Outage`` (as patient as any command). A
    slot being migrated (``ASK``) is asked through the cluster client, which
    follows the redirection (with a ``wait``, those calls count as short).
    """
    replies: list = [None] * len(calls)
    todo = list(range(len(calls)))
    failed: list[Exception] = []

    def attempt() -> None:
        nonlocal todo
        if len(todo) < len(calls) or failed:
            # The map as it is now, after the pause: a failover is seen as soon as it is done.
            client.nodes_manager.initialize()
        groups: dict[str, tuple] = {}
        for i in todo:
            node = client.get_node_from_key(calls[i][1][0])
            groups.setdefault(node.name, (node, []))[1].append(i)
        again, error = [], None
        for node, idxs in groups.values():
            try:
                out = _on_node(client.get_redis_connection(node), [calls[i] for i in idxs], wait, raise_on_error=False)
            except (redis.ConnectionError, redis.TimeoutError) as e:
                again, error = again + idxs, e
                continue
            error = _sort(calls, idxs, out, replies, again, wait, node.name) or error
        todo = again
        if todo:
            failed.append(error)
            raise error

    outage = getattr(client, "outage", None)
    if outage is not None:
        outage.run(attempt, "scripts")
    else:
        attempt()
    if raise_on_error:
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    return replies


def _sort(calls: list, idxs: list[int], out: list, replies: list, again: list[int], wait: Wait | None,
          node: str) -> Exception | None:
    """File one node's replies: answers into ``replies``, calls to send again into ``again``.

    Returns the last redirection or refusal met (None if none).
    """
    error = None
    for i, reply in zip(idxs, out):
        if isinstance(reply, AskError) and not isinstance(reply, MovedError):
            script, keys, args = calls[i]
            replies[i] = Script.__call__(script, keys, args)  # redis-py's way follows ASK; no WAIT there
            if wait is not None:
                wait.note(None, node)
        elif isinstance(reply, _ELSEWHERE):
            again.append(i)
            error = reply
        else:
            replies[i] = reply
    return error
