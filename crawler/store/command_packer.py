"""Commands packed by hiredis as they are where redis-py's rewriting would change nothing.

redis-py's hiredis packer first rewrites every command: it splits a first
argument on its whitespace (``"SCRIPT LOAD"``: two words of the protocol) and
copies each ``bytearray`` or ``memoryview`` argument to ``bytes``, in a
Python loop over the arguments, and only then calls ``hiredis.pack_command``.
That loop cost as much as the packing: ~8 µs of a worker's script call of
~40 arguments, against ~3.5 µs for ``pack_command`` alone, and twice the
packing of a recording's calls of thousands of arguments (measured alone:
bench/results/2026-11-29-bench_visit_cost-packing.md). The commands a worker
sends are a command name and ``str``, ``bytes`` and numbers, which
``pack_command`` takes as they are, so ``ArgsPacker`` hands such a command to
it directly; any other (a first argument that is not a name of letters, or
an argument ``pack_command`` refuses) goes through redis-py's own packer, which rewrites
it or raises its ``DataError``. The bytes on the wire are the same either way.

It is a connection's ``command_packer`` (a parameter of redis-py's
connections), set by ``crawler.store.connection_pool.checked_when_dirty``'s
connection classes: a worker's single-Redis client and every cluster node's.
"""

from __future__ import annotations

import hiredis
from redis.connection import HiredisRespSerializer


class ArgsPacker:
    """A redis-py command packer: ``pack(*args)``, the command's protocol bytes in a list."""

    def __init__(self):
        self._rewriting = HiredisRespSerializer()

    def pack(self, *args) -> list[bytes]:
        """``args`` (a command: its name first) as the protocol's bytes, as redis-py would pack them."""
        first = args[0]
        kind = type(first)
        # what redis-py's packer leaves as it is: a name of letters alone (it splits a str on
        # whitespace, an empty one into nothing), bytes without a space
        if (kind is str and first.isalpha()) or (kind is bytes and b" " not in first):
            try:
                return [hiredis.pack_command(args)]
            except TypeError:  # an argument pack_command refuses: redis-py's packer converts or says why
                pass
        return self._rewriting.pack(*args)
