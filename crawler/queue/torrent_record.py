"""One torrent's record as the ``torrent`` command, the dashboard and ``--json`` show it.

``QueueView.torrent`` reads the torrent's keys in its shard in one round
trip; ``record`` makes the record of what they hold: its hash's fields, its
trackers and notes, its lease or due time, its tombstone or quarantine, its
pin, and its visit history. ``complete.lua`` packs each visit into the
history STRING (``HISTORY_ENTRY``: time, new score, peers found, seeders,
leechers, little-endian; ``NOT_REPORTED`` where the sources gave no count),
and ``pin.lua`` writes the ``pinned`` field. ``shown`` redacts what a third
party wrote (tracker URLs may carry passkeys).
"""

from __future__ import annotations

import json
import struct
from operator import itemgetter

from crawler import redact
from crawler.queue import coverage
from crawler.queue.source_notes import decode, read_last, tracker_list
from crawler.torrents.torrent_names import FIELD

# One visit in a torrent's history, as complete.lua packs it: time, new score,
# peers found, seeders, leechers (little-endian; NOT_REPORTED: the sources gave none).
HISTORY_ENTRY = struct.Struct("<IfIII")
NOT_REPORTED = 0xFFFFFFFF


def unpack_history(raw: bytes) -> list[dict]:
    """The visits packed in a torrent's history string, oldest first (a partial entry ignored).

    complete.lua writes the string as a ring (each visit over the oldest entry), so the entries
    are ordered here by their time, ties as stored; an entry of time 0 is the padding of a ring
    begun past its start, not a visit."""
    whole = raw[: len(raw) - len(raw) % HISTORY_ENTRY.size]
    entries = sorted((e for e in HISTORY_ENTRY.iter_unpack(whole) if e[0]), key=itemgetter(0))
    return [{"at": float(t), "score": float(f"{score:.7g}"), "peers": peers,
             "seeders": None if seeders == NOT_REPORTED else seeders,
             "leechers": None if leechers == NOT_REPORTED else leechers}
            for t, score, peers, seeders, leechers in entries]


def pin_shown(raw: str | None, now: float) -> str | float | None:
    """A torrent's pin as shown: "forever", the unix time it holds until, or None (none, or run out)."""
    if raw is None:
        return None
    if raw == "forever":
        return raw
    return float(raw) if float(raw) > now else None


def record(info_hash: str, state: str, score: float | None, now: float, defaults: tuple[str, ...], *, fields: dict,
           trackers, claims, due, deadline, tomb, min_intervals: dict, quarantine, expiries, history, at_risk,
           lane: str) -> dict:
    """The record of one torrent from what its keys hold (raw replies, as bytes); ``defaults``: the
    default trackers, which every visit asks besides the torrent's own."""
    h = {a.decode(): b.decode() for a, b in fields.items()}
    noted = decode({a.decode(): b.decode() for a, b in min_intervals.items()})
    own = sorted(t.decode() for t in trackers)

    def num(name: str, cast=int):
        return cast(h[name]) if name in h else None

    out = {
        "info_hash": info_hash,
        "name": h.get(FIELD),  # cleaned when added (crawler.torrents.torrent_names)
        "state": state,
        "score": score,
        "visits": num("visits") or 0,
        "failed_visits": num("failed_visits") or 0,
        "claims": int(claims) if claims else 0,
        "last_visit": num("last_visit", float),
        "last_outcome": h.get("last_outcome"),
        "last_failure": num("last_failure", float),
        "last_error": h.get("last_error"),
        "seeders": num("seeders"),
        "leechers": num("leechers"),
        "peers_last_visit": num("peers_last_visit"),
        # what its peers' metadata gave (crawler.queue.torrent_metadata)
        "total_size": num("size"), "file_count": num("files"), "metadata_next_try": num("md_next", float),
        **coverage.of_torrent(h, now),
        "trackers": own,
        "due": due if state == "cooling" else None,
        "lease_deadline": deadline if state == "in_flight" else None,
        "tracker_not_before": noted.not_before,
        "last_visit_sources": read_last(noted.last, tracker_list(defaults, own)),
        "dht_schedule": {"empty_lookups_in_a_row": noted.dht_empty,
                         "next_lookup": noted.dht_not_before or None},
        "expired_leases_in_a_row": int(expiries) if expiries else 0,
        "first_visit": num("first_visit", float),
        "last_peers": num("last_peers", float),
        "lane": lane,
        "pinned": pin_shown(h.get("pinned"), now),
        "at_risk_from": at_risk,
        "history": unpack_history(history or b""),
    }
    if tomb:
        out["tombstone"] = json.loads(tomb)
    if quarantine and state == "quarantined":
        q = json.loads(quarantine)
        q["last_error"] = out["last_error"]
        q["message"] = q["reason"] + (f"; last error: {out['last_error']}" if out["last_error"]
                                      else "; no visit error recorded")
        out["quarantine"] = q
    return out


def shown(info: dict) -> dict:
    """``QueueView.torrent``'s answer as shown to anyone: tracker URLs redacted (they may carry passkeys)."""
    info["trackers"] = [redact.url(u) for u in info["trackers"]]
    info["tracker_not_before"] = {redact.url(u): t for u, t in info["tracker_not_before"].items()}
    last = info.get("last_visit_sources") or {}
    if "trackers" in last:
        last["trackers"] = {redact.url(u): what for u, what in last["trackers"].items()}
    return info
