"""What a record.lua call answers, read.

Each visit's count, and the place mark times its whole records teach ``fresh_places``; or, for a
call that wrote nothing, what its visits lack to be sent again. A call writes nothing when a
visit's torrent has marks at a width the call carries no buckets for (``{'widths', the codes each
visit needs}``), or when a visit sent its torrent parts in blocks, as a torrent never counted,
that was counted after all (``{'unfresh', '1' for each such visit}``). The recorder sends those
calls' visits again, with the widths, without the blocks.
"""

from __future__ import annotations

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.script_args import RecordBatch
from crawler.errors import StoreError

# Beside the width codes (bits 0-6) a visit lacks: its blocks were of a torrent counted after all.
COUNTED = 1 << 7


def read_reply(batch: RecordBatch, reply, short: dict[int, int], fresh: FreshPlaces) -> list[tuple[int, int]]:
    """``(position, count of torrents.<h>.users)`` per visit of ``batch`` whose call ran; none for a
    call that wrote nothing, whose visits are then in ``short`` (position -> width codes, with
    ``COUNTED``). Raises ``StoreError`` for an answer that does not fit the call."""
    if reply and reply[0] in (b"widths", b"unfresh"):
        if len(reply) != 2 or len(reply[1]) != len(batch.order):
            raise StoreError(f"recording peers failed: record.lua answered {reply!r:.80} for "
                             f"{len(batch.order)} visits")
        if reply[0] == b"widths":
            for i, need in zip(batch.order, reply[1]):
                short[i] = short.get(i, 0) | need
        else:  # those it names go again without blocks; the others of the call go again as they were
            for i, again in zip(batch.order, reply[1]):
                short[i] = short.get(i, 0) | (COUNTED if again == ord("1") else 0)
        return []
    if batch.mixed:  # the visits' counts, then the place mark times of its whole records
        reply, times = reply[:-1], reply[-1]
        if len(times) != 4 * len(batch.learn):
            raise StoreError(f"recording peers failed: record.lua answered {len(times)} bytes of place "
                             f"mark times for {len(batch.learn)} IPs")
        fresh.learn_many(batch.learn, times)
    return [(i, int(n)) for i, n in zip(batch.order, reply, strict=True)]
