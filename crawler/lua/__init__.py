"""Lua scripts kept as files, loaded once and called by SHA.

Each ``.lua`` file starts with a header listing its KEYS and ARGV. Every key a
script touches arrives through KEYS (never built inside Lua), so the scripts
run on Redis Cluster.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis


@cache
def source(name: str) -> str:
    """The text of ``<name>.lua`` shipped in this package or a sibling."""
    return resources.files(__package__).joinpath(name + ".lua").read_text("utf-8")


def register(client: redis.Redis, name: str, package: str | None = None) -> "redis.commands.core.Script":
    """A redis-py Script for ``name``: EVALSHA, loading the script on NOSCRIPT."""
    if package is None:
        text = source(name)
    else:
        text = resources.files(package).joinpath(name + ".lua").read_text("utf-8")
    return client.register_script(text)
