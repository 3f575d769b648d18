"""GeoIP errors: the workers' tally in ``Keys.geo_errors`` and its report for ``status``.

Two kinds, each making a peer count as unplaced (for all its place, or for
one part of it) while its visit completes:

- ``read_error``: a damaged GeoIP database makes some lookups fail;
- ``name_too_long``: a record names a country, city or postcode longer than
  a metric's name may be (``geo.name_bound.MAX_NAME_BYTES``); that part, and with a
  country the rest, counts as unknown.

``GeoErrorTally`` adds each process's new errors to one hash (``errors``:
every kind together; ``kind:<kind>``: each kind's; ``last``, ``at``), so the
operator sees why in ``status`` (``geo_error_report``) rather than in one
worker's log.
"""

from __future__ import annotations

from typing import cast

import redis

from crawler import logs
from crawler.errors import StoreError
from crawler.keys import Keys

log = logs.get("counters")

READ_ERROR = "read_error"
NAME_TOO_LONG = "name_too_long"
KINDS = (READ_ERROR, NAME_TOO_LONG)

# each kind's log event and what it means
_LOG = {
    READ_ERROR: ("geoip_read_errors", "GeoIP lookups failed on a damaged database; those peers count as unplaced"),
    NAME_TOO_LONG: ("geoip_names_too_long", "GeoIP names longer than a metric's name may hold were left out; "
                    "those peers count as unplaced for that part"),
}


class GeoErrorTally:
    """Publishes a ``geo.Locator``'s errors, and names a recorder left out, to ``Keys.geo_errors``.

    ``locator``: anything with ``read_errors`` and ``name_errors`` (counts)
    and ``last_read_error``, ``last_name_error`` (texts); a count it lacks is
    taken as 0.
    """

    def __init__(self, client: redis.Redis, keys: Keys, locator):
        self.client, self.keys, self.locator = client, keys, locator
        # names over the bound in places the recorder was handed (``places.PlaceInfo.dropped``)
        self.names_dropped = 0
        self._last_dropped: str | None = None
        self.published = self._totals()

    def _totals(self) -> dict[str, int]:
        loc = self.locator
        return {READ_ERROR: getattr(loc, "read_errors", 0),
                NAME_TOO_LONG: getattr(loc, "name_errors", 0) + self.names_dropped}

    def _last(self, kind: str) -> str:
        if kind == READ_ERROR:
            text = getattr(self.locator, "last_read_error", None)
        else:
            text = getattr(self.locator, "last_name_error", None) or self._last_dropped
        return text or ""

    def dropped(self, errors) -> None:
        """Count names the recorder read as unknown (``NameTooLong`` errors); published by the
        next ``publish``."""
        for e in errors:
            self.names_dropped += 1
            self._last_dropped = f"{NAME_TOO_LONG}: {e}; counted as unplaced for its {e.part}"

    def publish(self, now: float) -> None:
        """Add the errors not yet published (one round trip; none when there are none).

        Raises ``StoreError`` if Redis fails; those errors are then published
        by a later call.
        """
        totals = self._totals()
        if totals == self.published:
            return
        # taken before the round trip: another greenlet's visit must not publish the same errors
        delta = {k: totals[k] - self.published[k] for k in KINDS if totals[k] != self.published[k]}
        self.published = totals
        last = READ_ERROR if READ_ERROR in delta else NAME_TOO_LONG  # a damaged database says more
        p = self.client.pipeline(transaction=True)
        p.hincrby(self.keys.geo_errors, "errors", sum(delta.values()))
        for kind, n in delta.items():
            p.hincrby(self.keys.geo_errors, f"kind:{kind}", n)
        p.hset(self.keys.geo_errors, mapping={"last": self._last(last), "at": int(now)})
        try:
            p.execute()
        except redis.RedisError as e:
            self.published = {k: self.published[k] - delta.get(k, 0) for k in KINDS}
            raise StoreError(f"recording GeoIP errors failed: {e}") from e
        for kind in delta:
            event, why = _LOG[kind]
            log.warning(event, errors=totals[kind], last=self._last(kind), message=why)


def geo_error_report(client: redis.Redis, keys: Keys) -> dict | None:
    """GeoIP errors for ``status``: ``{"errors", "kinds", "last", "at"}``, or None if there were none.

    ``errors`` counts every kind; ``kinds`` each kind's count (``read_error``,
    ``name_too_long``), those that happened.
    """
    try:
        got = cast(dict[bytes, bytes], client.hgetall(keys.geo_errors))  # the client decodes no replies
    except redis.RedisError as e:
        raise StoreError(f"reading GeoIP errors failed: {e}") from e
    if not got:
        return None
    d = {k.decode(): v.decode("utf-8", "replace") for k, v in got.items()}
    errors = int(d.get("errors", 0))
    kinds = {k[5:]: int(v) for k, v in d.items() if k.startswith("kind:") and v.isdigit()}
    rest = errors - sum(kinds.values())
    if rest > 0:  # a tally written without kind fields counted read errors alone
        kinds[READ_ERROR] = kinds.get(READ_ERROR, 0) + rest
    return {"errors": errors, "kinds": kinds, "last": d.get("last") or None,
            "at": int(d["at"]) if d.get("at", "").isdigit() else None}
