"""One visit of located IPs through a ``Recorder``, for the counter tests and their models.

``record_places`` records it through the worker's path
(``Recorder.record_places_many``); ``probe`` asks probe.lua what it would
find, recording nothing, built from the recorder's own probe calls so that a
test sees exactly what the recording path sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from crawler.counters import Recorder
from crawler.counters.names import info_hash_hex


def record_places(rec: Recorder, info_hash: str, located: Iterable[tuple[bytes, object]], now: float) -> int:
    """Record one visit of ``(packed_ip, Place)`` pairs on ``info_hash`` at ``now``; its ``new``.

    Raises what ``Recorder.record_places_many`` raises.
    """
    return rec.record_places_many([(info_hash, located)], now)[0]


def probe(rec: Recorder, info_hash: str, located: Iterable[tuple[bytes, object]], now: float) -> str:
    """What probe.lua answers for ``located`` at ``now``, recording nothing.

    One character per distinct IP, in order: "1" if it might count, "0" if
    its group record is fresh (it cannot count); "" without IPs. Raises
    ``ValueError`` for a bad info-hash.
    """
    h = info_hash_hex(info_hash)
    part = rec._probe_calls(h, rec.fingerprints.torrent(h), rec.met_ips.located(located))
    return "" if part is None else rec._probe_many(int(now), [part], rec.swarms.lookups.first())[0].decode()
