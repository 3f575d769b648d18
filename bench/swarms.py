"""Swarms of loopback peers announced straight into an opentracker, as the worker benchmarks build them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

# The peers' ports: 20000-39999, below the range the crawler's own announce port is drawn from
# (self_filter.RANDOM_PORT_RANGE). A peer on that port is taken for the crawler's own entry and
# dropped, as it would be on the internet: a bench whose truth is "every peer counts" must not have one.
PORTS = 20000


def hashes_for(tag: str, n: int) -> list[str]:
    """``n`` info-hashes derived from ``tag``."""
    return [hashlib.sha1(f"{tag}-{i}".encode()).hexdigest() for i in range(n)]


def addresses_for(torrents: int, overlap: int, swarm: int) -> int:
    """How many peer addresses ``populate`` gives ``torrents`` swarms of ``swarm`` (no ``limit``)."""
    return max(swarm, torrents * swarm // max(overlap, 1))


def populate(ot, hashes: list[str], overlap: int, address: Callable[[int], str], swarm: int,
             limit: int | None = None) -> int:
    """Give every torrent ``swarm`` distinct peers, the ``k``-th at ``address(k)``, each address in
    ``overlap`` swarms (at most ``limit`` addresses); returns how many addresses there are."""
    n_addr = addresses_for(len(hashes), overlap, swarm)
    if limit is not None:
        n_addr = min(limit, n_addr)
    swarms: dict[int, list[str]] = {}
    for i, h in enumerate(hashes):
        for j in range(swarm):
            swarms.setdefault((i * swarm + j) % n_addr, []).append(h)
    for k, torrents in swarms.items():
        ot.announce_many(address(k), torrents, PORTS + k % 20000, left=0 if k % 3 == 0 else 1)
    return n_addr
