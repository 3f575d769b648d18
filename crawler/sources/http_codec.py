"""HTTP tracker announces (BEP 3, 7, 23), sans-IO: URL out, bencoded reply in.

Also the bare minimum of HTTP/1.1 the client needs: the request bytes and a
parser for a whole response (status, headers, body with Content-Length or
chunked transfer coding). The client reads raw bytes under a size cap and a
deadline and hands them here; nothing in this module touches a socket.

Malformations raise ``HttpReplyError``; a tracker that answers with
``failure reason`` raises ``TrackerRefused`` (it is alive, it said no).
"""

from __future__ import annotations

import re
import socket
import urllib.parse
from dataclasses import dataclass

from crawler import bencode
from crawler.errors import RemoteProtocolError, one_line
from crawler.sources.peers import Peer, PeerListError, canonical_ip, parse_compact

# Numbers in HTTP heads are ASCII digits only: str.isdigit() also accepts "²"
# and "١", which int() then refuses or reads. 18 decimal digits (an exabyte)
# or 16 hex digits are past any size the client would read.
_DECIMAL = re.compile(r"[0-9]{1,18}")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")

# An announce reply's integers are bencode's, up to 64 digits. An interval
# above BEP 15's field width (2^32 - 1 s, 136 years: "do not come back") is
# clamped to it, so the float() downstream cannot overflow; a negative one
# is refused. A count above that width is no real swarm's and is refused.
MAX_INTERVAL = 2**32 - 1
MAX_COUNT = 2**32 - 1


class HttpReplyError(RemoteProtocolError):
    """An HTTP tracker's response is malformed; the message says how."""


class TrackerRefused(RemoteProtocolError):
    """The tracker answered with a failure reason (HTTP) or an error action (UDP)."""


def announce_url(
    base: str,
    info_hash: bytes,
    peer_id: bytes,
    port: int,
    numwant: int,
    event: str | None = "started",
    left: int = 1,
    key: int | None = None,
) -> str:
    """The announce URL: ``base`` plus the BEP 3 query, binary fields percent-encoded.

    ``event`` is "started", "stopped", "completed" or None. ``base`` may
    already carry a query (private trackers' passkeys); ours is appended.
    """
    q = [
        ("info_hash", urllib.parse.quote_from_bytes(info_hash, safe="")),
        ("peer_id", urllib.parse.quote_from_bytes(peer_id, safe="")),
        ("port", str(port)),
        ("uploaded", "0"),
        ("downloaded", "0"),
        ("left", str(left)),
        ("compact", "1"),
        ("numwant", str(numwant)),
    ]
    if event:
        q.append(("event", event))
    if key is not None:
        q.append(("key", f"{key:08x}"))
    sep = "&" if "?" in base else "?"
    return base + sep + "&".join(f"{k}={v}" for k, v in q)


@dataclass(frozen=True)
class HttpAnnounceReply:
    peers: tuple[Peer, ...]
    interval: int | None = None
    min_interval: int | None = None
    complete: int | None = None
    incomplete: int | None = None
    warning: str | None = None


def _int_field(d: dict, key: bytes, clamp: bool = False) -> int | None:
    """The non-negative integer at ``key``, or None; an interval (``clamp``) is cut to
    ``MAX_INTERVAL``, a count above ``MAX_COUNT`` refused."""
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or v < 0:
        raise HttpReplyError(f"{key.decode()!r} is not a non-negative integer: {v!r:.40}")
    if clamp:
        return min(v, MAX_INTERVAL)
    if v > MAX_COUNT:
        raise HttpReplyError(f"{key.decode()!r} of {len(str(v))} digits is past any swarm's size")
    return v


def _text(v: object) -> str:
    """A tracker's message for one line of a log or ``status``."""
    return one_line(v.decode("utf-8", "replace") if isinstance(v, bytes) else repr(v), 300)


def parse_announce_reply(body: bytes) -> HttpAnnounceReply:
    """Parse a bencoded announce reply.

    ``peers`` may be compact (BEP 23) or a list of dictionaries with ``ip`` and
    ``port``; ``peers6`` (BEP 7) adds IPv6 entries. Raises ``TrackerRefused``
    for ``failure reason``, ``HttpReplyError`` (or its cause ``BencodeError``,
    also a ``RemoteProtocolError``) for anything malformed.
    """
    try:
        d = bencode.decode(body)
    except bencode.BencodeError as e:
        raise HttpReplyError(f"reply is not bencoded: {e}") from None
    if not isinstance(d, dict):
        raise HttpReplyError(f"reply is a {type(d).__name__}, not a dictionary")
    if b"failure reason" in d:
        raise TrackerRefused(f"tracker refused: {_text(d[b'failure reason'])}")
    peers: list[Peer] = []
    raw = d.get(b"peers", b"")
    try:
        if isinstance(raw, bytes):
            peers.extend(parse_compact(raw, socket.AF_INET))
        elif isinstance(raw, list):
            peers.extend(_dict_peers(raw))
        else:
            raise HttpReplyError(f"'peers' is a {type(raw).__name__}")
        raw6 = d.get(b"peers6", b"")
        if not isinstance(raw6, bytes):
            raise HttpReplyError(f"'peers6' is a {type(raw6).__name__}, not a byte string")
        peers.extend(parse_compact(raw6, socket.AF_INET6))
    except PeerListError as e:
        raise HttpReplyError(str(e)) from None
    warning = d.get(b"warning message")
    return HttpAnnounceReply(
        peers=tuple(peers),
        interval=_int_field(d, b"interval", clamp=True),
        min_interval=_int_field(d, b"min interval", clamp=True),
        complete=_int_field(d, b"complete"),
        incomplete=_int_field(d, b"incomplete"),
        warning=None if warning is None else _text(warning),
    )


def _dict_peers(items: list) -> list[Peer]:
    out = []
    for i, p in enumerate(items):
        if not isinstance(p, dict):
            raise HttpReplyError(f"peer {i} is a {type(p).__name__}, not a dictionary")
        ip, port = p.get(b"ip"), p.get(b"port")
        if not isinstance(ip, bytes) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise HttpReplyError(f"peer {i} lacks a valid ip/port: {p!r:.80}")
        if port:
            out.append((canonical_ip(ip.decode("ascii", "replace")), port))
    return out


# --- HTTP/1.1, just enough ---------------------------------------------------


def request_bytes(host_header: str, target: str) -> bytes:
    """A GET request that asks the server to close after replying."""
    return (
        f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: peercrawl/0.1\r\n"
        "Accept-Encoding: identity\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def split_head(raw: bytes) -> tuple[int, dict[str, str], int] | None:
    """(status, lower-cased headers, body offset) once the head is complete, else None.

    Raises ``HttpReplyError`` for a malformed status line or header.
    """
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = raw[:end].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise HttpReplyError(f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise HttpReplyError(f"bad header line {line[:80]!r}")
        headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    return int(parts[1]), headers, end + 4


def content_length(headers: dict[str, str]) -> int | None:
    """The Content-Length, or None without one; raises ``HttpReplyError`` unless it is ASCII digits."""
    v = headers.get("content-length")
    if v is None:
        return None
    if not _DECIMAL.fullmatch(v):
        raise HttpReplyError(f"bad Content-Length {v[:20]!r}")
    return int(v)


def body_complete(headers: dict[str, str], body: bytes) -> bool:
    """Whether ``body`` is all of it (so the client may stop reading before close).

    Raises ``HttpReplyError`` for a bad Content-Length.
    """
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return body.endswith(b"0\r\n\r\n")
    length = content_length(headers)
    return length is not None and len(body) >= length


def parse_response(raw: bytes, closed: bool = True) -> HttpResponse:
    """Parse a whole response read until close (or until ``body_complete``).

    Raises ``HttpReplyError`` for a truncated or malformed response.
    """
    head = split_head(raw)
    if head is None:
        raise HttpReplyError(f"response head incomplete after {len(raw)} bytes")
    status, headers, off = head
    body = raw[off:]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = dechunk(body)
    elif (cl := content_length(headers)) is not None:
        if len(body) < cl:
            raise HttpReplyError(f"body truncated: {len(body)} of {cl} bytes")
        body = body[:cl]
    return HttpResponse(status, headers, body)


def dechunk(data: bytes) -> bytes:
    """Decode a chunked body; raises ``HttpReplyError`` if malformed or truncated."""
    out = []
    i = 0
    while True:
        eol = data.find(b"\r\n", i)
        if eol < 0:
            raise HttpReplyError("chunked body truncated in a chunk size")
        size_text = data[i:eol].split(b";", 1)[0].strip()
        # int(x, 16) alone would also take "0x10", "+10", "1_0" and "-1".
        if not _HEX.fullmatch(size_text):
            raise HttpReplyError(f"bad chunk size {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            return b"".join(out)
        start = eol + 2
        if start + size + 2 > len(data) or data[start + size : start + size + 2] != b"\r\n":
            raise HttpReplyError("chunked body truncated in a chunk")
        out.append(data[start : start + size])
        i = start + size + 2
