"""The parts of a tracker URL the exchanges need, parsed once per URL."""

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
