"""GeoIP read errors: the workers' tally in ``Keys.geo_errors`` and its report for ``status``.

A damaged GeoIP database makes some lookups fail; those peers are recorded
as unplaced. ``GeoErrorTally`` adds each process's new read errors to one
hash (``errors``, ``last``, ``at``), so the operator sees why in ``status``
(``geo_error_report``) rather than in one worker's log.
"""

from __future__ import annotations

import redis

from crawler import logs
from crawler.errors import StoreError
from crawler.keys import Keys

log = logs.get("counters")


class GeoErrorTally:
    """Publishes a ``geo.Locator``'s read errors to ``Keys.geo_errors``.

    ``locator``: anything with ``read_errors`` (a count) and
    ``last_read_error``; a locator without them never publishes.
    """

    def __init__(self, client: redis.Redis, keys: Keys, locator):
        self.client, self.keys, self.locator = client, keys, locator
        self.published = getattr(locator, "read_errors", 0)

    def publish(self, now: float) -> None:
        """Add the read errors not yet published (one round trip; none when there are none).

        Raises ``StoreError`` if Redis fails; those errors are then published
        by a later call.
        """
        total = getattr(self.locator, "read_errors", 0)
        if total == self.published:
            return
        # taken before the round trip: another greenlet's visit must not publish the same errors
        delta, self.published = total - self.published, total
        p = self.client.pipeline(transaction=True)
        p.hincrby(self.keys.geo_errors, "errors", delta)
        p.hset(self.keys.geo_errors, mapping={"last": self.locator.last_read_error or "", "at": int(now)})
        try:
            p.execute()
        except redis.RedisError as e:
            self.published -= delta
            raise StoreError(f"recording GeoIP read errors failed: {e}") from e
        log.warning("geoip_read_errors", errors=total, last=self.locator.last_read_error,
                    message="GeoIP lookups failed on a damaged database; those peers count as unplaced")


def geo_error_report(client: redis.Redis, keys: Keys) -> dict | None:
    """GeoIP read errors for ``status``: ``{"errors", "last", "at"}``, or None if there were none."""
    try:
        got = client.hgetall(keys.geo_errors)
    except redis.RedisError as e:
        raise StoreError(f"reading GeoIP errors failed: {e}") from e
    if not got:
        return None
    d = {k.decode(): v.decode("utf-8", "replace") for k, v in got.items()}
    return {"errors": int(d.get("errors", 0)), "last": d.get("last") or None,
            "at": int(d["at"]) if d.get("at", "").isdigit() else None}
