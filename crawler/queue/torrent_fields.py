"""One torrent's stored fields as they are shown: its visit history string and its pin.

``complete.lua`` packs each visit into the torrent's history STRING (20 bytes:
time, new score, peers found, seeders, leechers, little-endian; NOT_REPORTED
where the sources gave no count), and ``pin.lua`` writes the torrent's
``pinned`` field; ``QueueView.torrent`` shows both through these.
"""

from __future__ import annotations

import struct

# One visit in a torrent's history, as complete.lua packs it: time, new score,
# peers found, seeders, leechers (little-endian; NOT_REPORTED: the sources gave none).
HISTORY_ENTRY = struct.Struct("<IfIII")
NOT_REPORTED = 0xFFFFFFFF


def history(raw: bytes) -> list[dict]:
    """The visits packed in a torrent's history string, oldest first (a partial entry ignored)."""
    whole = raw[: len(raw) - len(raw) % HISTORY_ENTRY.size]
    return [{"at": float(t), "score": float(f"{score:.7g}"), "peers": peers,
             "seeders": None if seeders == NOT_REPORTED else seeders,
             "leechers": None if leechers == NOT_REPORTED else leechers}
            for t, score, peers, seeders, leechers in HISTORY_ENTRY.iter_unpack(whole)]


def pin_shown(raw: str | None, now: float) -> str | float | None:
    """A torrent's pin as shown: "forever", the unix time it holds until, or None (none, or run out)."""
    if raw is None:
        return None
    if raw == "forever":
        return raw
    return float(raw) if float(raw) > now else None
