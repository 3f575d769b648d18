"""One HTTP tracker exchange: the announce, then its withdrawal read for its counts.

``get(event, until, keep)`` sends one announce (``started`` or ``stopped``)
and parses its reply, keeping at most ``keep`` peers. The withdrawal is best
effort: it is read for its counts only (the swarm without us: opentracker
counts the announcer in the first reply), none of its peers decoded, and its
failure leaves the answer standing.
"""

from __future__ import annotations

import time

from crawler.errors import StoreError
from crawler.sources.trackers.http_codec import HttpAnnounceReply


def http_exchange(get, deadline: float, http_timeout: float, stop_timeout: float,
                  limit: int) -> tuple[HttpAnnounceReply, tuple[int, int] | None]:
    """The announce's reply (``limit`` peers at most) and the withdrawal's (seeders, leechers), or None.

    ``http_timeout`` bounds the announce (redirects included) and
    ``stop_timeout`` the withdrawal, each within ``deadline`` (monotonic).
    Raises what the announce raised; ``StoreError`` from either.
    """
    reply = get("started", min(deadline, time.monotonic() + http_timeout), limit)
    stopped = None
    try:
        r = get("stopped", min(deadline, time.monotonic() + stop_timeout), 0)
        if r.complete is not None and r.incomplete is not None:
            stopped = (r.complete, r.incomplete)
    except StoreError:
        raise
    except Exception:  # noqa: BLE001 - the withdrawal is best effort; the answer stands
        pass
    return reply, stopped
