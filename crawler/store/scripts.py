"""Lua scripts kept as files, loaded once and called by SHA.

Each ``.lua`` file starts with a header listing its KEYS and ARGV. Every key a
script touches arrives through KEYS (never built inside Lua), so the scripts
run on Redis Cluster.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from crawler.store.cluster_run import ClusterScript, cluster_run, on_node
from crawler.store.outage import transient
from crawler.store.replica_wait import Wait

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
    node's own client (``cluster_run.cluster_run``).

    ``wait``: a ``Wait``; the batch returns once that many replicas have its
    writes (or its timeout passed), one round trip more per node. Raises
    ``redis.RedisError`` (a script's error reply: the first of them, after
    every call ran).

    A single call without ``wait`` on one Redis is sent as the script's own
    call, without a pipeline (the same round trip, less client work). To
    share round trips with other greenlets' calls, run them through a
    ``handle.Store`` with a coalescer.
    """
    replies = replies_of(client, calls, wait)
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
        return cluster_run(client, calls, wait, raise_on_error=False)
    if wait is not None:
        return on_node(client, calls, wait, raise_on_error=False)
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
