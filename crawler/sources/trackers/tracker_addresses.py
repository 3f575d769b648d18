"""Where a tracker's requests go: its host's checked addresses, the one that answered last first.

A host's addresses (A and AAAA records, round-robin DNS) are resolved at
most once per ``DNS_TTL`` and every one is checked by the address policy
(``addresses.resolve``). The address that last answered a UDP request, or
accepted an HTTP connection, is kept per (protocol, host, port) in ``good``
and tried first next time, so a dead address costs one request its share of
the time, not every request. Both caches are ``Lru`` of the tracker cache
size (``Settings.tracker_cache_size``): strangers name the hosts.
"""

from __future__ import annotations

import time

from crawler import redact
from crawler.sources.addresses import AddressCheck, Resolver, first, resolve
from crawler.sources.lru import Lru
from crawler.sources.trackers.tracker_urls import url_parts

# A tracker's address rarely changes; re-resolving per announce would cost a
# DNS query per torrent.
DNS_TTL = 300.0


class TrackerAddresses:
    """The addresses of one worker process's trackers (one per ``Trackers``).

    ``check``: the address policy; ``resolver``: None for the system's.
    ``dns``: (host, port) -> (checked addresses, time.monotonic() they expire);
    ``good``: ("udp" | "tcp", host, port) -> the address that answered last
    (the HTTP client reads and updates it as ``preferred``).
    """

    def __init__(self, check: AddressCheck, resolver: Resolver | None, cache_size: int):
        self.check, self.resolver = check, resolver
        self.dns: Lru[tuple[str, int], tuple[list, float]] = Lru(cache_size)
        self.good: Lru[tuple[str, str, int], tuple] = Lru(cache_size)

    def targets(self, host: str, port: int, what: str) -> list:
        """The checked (family, address) pairs of host:port, the one that answered last first."""
        cached = self.dns.get((host, port))
        if cached is not None and time.monotonic() < cached[1]:
            targets = cached[0]
        else:
            targets = resolve(host, port, self.check, what, self.resolver)
            self.dns[(host, port)] = (targets, time.monotonic() + DNS_TTL)
        return first(targets, self.good.get(("udp", host, port)))

    def udp_targets(self, url: str) -> list:
        """``targets`` of a UDP tracker URL (what its scrape goes to)."""
        _, host, port, netloc = url_parts(url)
        if not host or not port:
            raise ValueError("UDP tracker URL lacks a host or port")
        return self.targets(host, port, f"tracker {redact.url(f'udp://{netloc}')}")
