"""The parts of a tracker URL the exchanges need, parsed once per URL, and which URLs name one tracker."""

from __future__ import annotations

import urllib.parse
from functools import lru_cache


@lru_cache(maxsize=4096)
def url_parts(url: str) -> tuple[str, str | None, int | None, str]:
    """(scheme, host, port, netloc) of a tracker URL, host and port None when missing or malformed.

    Cached: parsing the same few URLs again at every announce cost ~4 % of it.
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unclosed "[" of an IPv6 host
        return url.partition(":")[0].lower(), None, None, ""
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    return parts.scheme.lower(), host, port, parts.netloc


# The port a tracker URL without one is served on.
DEFAULT_PORTS = {"http": 80, "https": 443}
# Which URL of one tracker a visit asks: UDP (two datagrams), then HTTPS, then HTTP.
PREFERENCE = {"udp": 0, "https": 1, "http": 2}


@lru_cache(maxsize=4096)
def tracker_of(url: str) -> tuple[str, int, str] | str:
    """The tracker service behind ``url``: (host, port, path and query), or the URL itself when it names
    no host or port.

    One host, port and path is one tracker whatever the scheme: the trackers
    that publish both a UDP and an HTTP URL (``udp://t:1337/announce`` and
    ``http://t:1337/announce``) serve both from one swarm store (opentracker,
    chihaya, aquatic), so asking both asks one swarm twice. A URL without a
    path is taken as ``/announce`` (UDP URLs often have none). Paths and
    queries that differ (a passkey, a host that serves several trackers by
    path) are different trackers."""
    scheme, host, port, _ = url_parts(url)
    port = port if port is not None else DEFAULT_PORTS.get(scheme)
    if host is None or port is None:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    path = parts.path.rstrip("/") or "/announce"
    return host.lower().rstrip("."), port, path + ("?" + parts.query if parts.query else "")


def by_tracker(urls: list[str]) -> list[list[str]]:
    """``urls`` grouped by ``tracker_of``, groups and URLs in the order given."""
    groups: dict = {}
    for u in urls:
        groups.setdefault(tracker_of(u), []).append(u)
    return list(groups.values())


def preferred(group: list[str], avoid=lambda url: False) -> str:
    """The URL of one tracker's ``group`` to ask: not ``avoid``-ed (backing off) first, then by scheme."""
    if len(group) == 1:  # most trackers have one URL: nothing to weigh
        return group[0]
    return min(group, key=lambda u: (bool(avoid(u)), PREFERENCE.get(url_parts(u)[0], len(PREFERENCE)), group.index(u)))
