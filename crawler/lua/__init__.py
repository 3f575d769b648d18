"""Lua scripts kept as files, loaded once and called by SHA.

Each ``.lua`` file starts with a header listing its KEYS and ARGV. Every key a
script touches arrives through KEYS (never built inside Lua), so the scripts
run on Redis Cluster.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis

# A line ``--! include NAME`` is replaced by the text of this package's
# NAME.lua: helpers several scripts share (slices.lua) have one home, and each
# script still reaches Redis as one self-contained text.
INCLUDE = "--! include "


@cache
def source(name: str, package: str | None = None) -> str:
    """The text of ``<name>.lua`` in this package (or ``package``), its includes inlined."""
    text = resources.files(package or __package__).joinpath(name + ".lua").read_text("utf-8")
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(INCLUDE):
            lines[i] = source(line[len(INCLUDE):].split()[0]).rstrip("\n")
    return "\n".join(lines)


def register(client: redis.Redis, name: str, package: str | None = None) -> "redis.commands.core.Script":
    """A redis-py Script for ``name``: EVALSHA, loading the script on NOSCRIPT."""
    return client.register_script(source(name, package))


def run_pipelined(client: redis.Redis, calls: list) -> list:
    """Run ``(script, keys, args)`` calls in one round trip; their replies in order.

    EVALSHA goes into the pipeline as is: redis-py's own pipelined scripts
    would first ask SCRIPT EXISTS, a second round trip every time. A call
    answered NOSCRIPT (Redis restarted or flushed its scripts) did nothing;
    it alone is run again through its Script, which loads it. Each call is
    its own atomic step. Raises ``redis.RedisError``.
    """
    pipe = client.pipeline(transaction=False)
    for script, keys, args in calls:
        # As a raw command: redis-py's cluster pipeline refuses its evalsha
        # method but routes the command by its first key like any other.
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    replies = pipe.execute(raise_on_error=False)
    for i, (script, keys, args) in enumerate(calls):
        if isinstance(replies[i], redis.exceptions.NoScriptError):
            replies[i] = script(keys=keys, args=args)
        elif isinstance(replies[i], Exception):
            raise replies[i]
    return replies
