"""HTTP tracker announces (BEP 3, 7, 23), sans-IO: URL out, bencoded reply in.

Also the HTTP/1.1 of one GET (``ResponseReader``): h11 writes the request and
frames the response (Content-Length, chunked, or until close) under a cap on
the head and on the body. The client moves the bytes under a deadline;
nothing in this module touches a socket.

Malformations raise ``HttpReplyError``; a tracker that answers with
``failure reason`` raises ``TrackerRefused`` (it is alive, it said no).
"""

from __future__ import annotations

import functools
import re
import socket
import urllib.parse
from dataclasses import dataclass

import h11

from crawler.bencode import codec as bencode
from crawler.errors import one_line
from crawler.sources.trackers.peers import Peer, PeerListError, canonical_ip, parse_compact
from crawler.sources.trackers.tracker_errors import HttpReplyError, HttpRequestError, ReplyTooLarge, TrackerRefused

# An announce reply's integers are bencode's, up to 64 digits. An interval
# above BEP 15's field width (2^32 - 1 s, 136 years: "do not come back") is
# clamped to it, so the float() downstream cannot overflow; a negative one
# is refused. A count above that width is no real swarm's and is refused.
MAX_INTERVAL = 2**32 - 1
MAX_COUNT = 2**32 - 1


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
    """An HTTP tracker's announce reply (BEP 3, BEP 23), fields absent from the reply None."""
    peers: tuple[Peer, ...]
    interval: int | None = None
    min_interval: int | None = None
    complete: int | None = None
    incomplete: int | None = None
    warning: str | None = None
    # entries of peers and peers6 past the caller's limit, not decoded
    cut: int = 0


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


# The values one reply may hold (bencode's budget; its docstring says what
# counts). A 200-peer reply holds ~10 values compact and ~1,400 as
# dictionaries (ip, port, peer id); a tracker that ignores numwant and lists
# 10,000 peers as dictionaries (70,000) still fits. Checking 100,000 values
# takes some 30-60 ms; past them the reply is refused, where a 2 MiB reply of
# a million empty values would hold the event loop for a second.
REPLY_MAX_VALUES = 100_000

_PEER = bencode.Keys({b"ip": bencode.LEAF, b"port": bencode.LEAF})


@functools.lru_cache(maxsize=256)
def _reply_schema(limit: int | None) -> bencode.Keys:
    """What is kept of a reply: the fields read below, and at most ``limit`` entries of a ``peers`` list."""
    leaf = bencode.LEAF
    return bencode.Keys({b"failure reason": leaf, b"warning message": leaf, b"interval": leaf,
                         b"min interval": leaf, b"complete": leaf, b"incomplete": leaf,
                         b"peers": bencode.Items(_PEER, limit), b"peers6": leaf})


def _kind(v: object) -> str:
    """What a decoded value is, with its article, for a message."""
    if isinstance(v, bencode.Skipped):
        return ("an " if v.kind[0] == "i" else "a ") + v.kind
    return {bytes: "a string", int: "an integer", list: "a list", dict: "a dictionary"}.get(
        type(v), f"a {type(v).__name__}")


def decode_reply(body: bytes, schema: bencode.Keys, what: str = "reply", refused: str = "tracker refused") -> dict:
    """A tracker's bencoded reply as ``schema`` keeps it (a ``failure reason`` among its fields).

    Raises ``TrackerRefused`` (``refused: reason``) for a ``failure reason``,
    and ``HttpReplyError`` for what is not bencode, holds more than
    ``REPLY_MAX_VALUES`` values, or is not a dictionary; ``what`` names the
    reply in those messages.
    """
    try:
        d = bencode.decode(body, schema, max_values=REPLY_MAX_VALUES)
    except bencode.TooManyValues as e:
        raise HttpReplyError(f"{what} too large to decode: {e}") from None
    except bencode.BencodeError as e:
        raise HttpReplyError(f"{what} is not bencoded: {e}") from None
    if not isinstance(d, dict):
        raise HttpReplyError(f"{what} is {_kind(d)}, not a dictionary")
    if b"failure reason" in d:
        raise TrackerRefused(f"{refused}: {_text(d[b'failure reason'])}")
    return d


def parse_announce_reply(body: bytes, limit: int | None = None) -> HttpAnnounceReply:
    """Parse a bencoded announce reply.

    ``peers`` may be compact (BEP 23) or a list of dictionaries with ``ip`` and
    ``port``; ``peers6`` (BEP 7) adds IPv6 entries. Raises ``TrackerRefused``
    for ``failure reason``, ``HttpReplyError`` (or its cause ``BencodeError``,
    also a ``RemoteProtocolError``) for anything malformed, and for a reply of
    more than ``REPLY_MAX_VALUES`` values.

    ``limit``: at most this many entries of each of ``peers`` and ``peers6``
    are decoded (and checked); the rest are counted in ``cut``. The limit
    applies while the reply is decoded: entries of a ``peers`` list past it
    are checked as bencode and counted, never built, and of every dictionary
    only the keys read here are kept. A compact list that is not whole
    entries is refused as a whole, as without a limit.
    """
    d = decode_reply(body, _reply_schema(limit))
    peers: list[Peer] = []
    cut = 0

    def bounded(entries: bytes, size: int) -> bytes:
        nonlocal cut
        n = len(entries) // size
        if limit is None or n <= limit or len(entries) % size:
            return entries
        cut += n - limit
        return entries[: limit * size]

    raw = d.get(b"peers", b"")
    try:
        if isinstance(raw, bytes):
            peers.extend(parse_compact(bounded(raw, 6), socket.AF_INET))
        elif isinstance(raw, bencode.Cut):
            peers.extend(_dict_peers(raw))
            cut += raw.cut
        else:
            raise HttpReplyError(f"'peers' is {_kind(raw)}")
        raw6 = d.get(b"peers6", b"")
        if not isinstance(raw6, bytes):
            raise HttpReplyError(f"'peers6' is {_kind(raw6)}, not a byte string")
        peers.extend(parse_compact(bounded(raw6, 18), socket.AF_INET6))
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
        cut=cut,
    )


def _dict_peers(items: list) -> list[Peer]:
    out = []
    for i, p in enumerate(items):
        if not isinstance(p, dict):
            raise HttpReplyError(f"peer {i} is {_kind(p)}, not a dictionary")
        ip, port = p.get(b"ip"), p.get(b"port")
        if not isinstance(ip, bytes) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise HttpReplyError(f"peer {i} lacks a valid ip/port: {p!r:.80}")
        if port:
            out.append((canonical_ip(ip.decode("ascii", "replace")), port))
    return out


# --- HTTP/1.1 framing, by h11 ------------------------------------------------

HEAD_MAX = 64 * 1024
USER_AGENT = "peercrawl/0.1"
# h11 spends some 10 us (30 under load) per chunk it frames: 1-byte chunks up
# to a 2 MiB body would hold the event loop for 20 s and more. A tracker
# writes its reply in a few chunks; 4096 of them cost at most ~0.1 s.
MAX_CHUNKS = 4096


@dataclass(frozen=True)
class HttpResponse:
    """A final response: status, headers (names lower-cased, Latin-1 text; the last of a name wins), body."""

    status: int
    headers: dict[str, str]
    body: bytes


class ResponseReader:
    """One GET on one connection, sans-IO: ``request`` is the bytes to send,
    ``feed`` takes the bytes received and returns the response once whole.

    h11 does the framing (status line, headers, Content-Length, chunked,
    close-delimited, 1xx skipped). Around it: the head may not pass
    ``max_head`` bytes, the body not ``max_body`` (counted as h11 delivers it,
    and refused at once when a Content-Length announces more), the bytes
    received not ``max_head + 2 * max_body`` (chunk framing and extensions
    count), a chunked body not ``MAX_CHUNKS`` chunks; every h11 error becomes
    an ``HttpReplyError`` of one line saying where it was.
    Raises ``HttpRequestError`` if ``host_header`` or ``target`` cannot be sent.
    """

    def __init__(self, host_header: str, target: str, max_body: int | None = None, max_head: int = HEAD_MAX):
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_head)
        self._max_body, self._max_head = max_body, max_head
        headers = [("Host", host_header), ("User-Agent", USER_AGENT), ("Accept-Encoding", "identity"),
                   ("Connection", "close")]
        try:
            self.request = self._conn.send(h11.Request(method="GET", target=target, headers=headers))
            self.request += self._conn.send(h11.EndOfMessage()) or b""
        except (h11.LocalProtocolError, UnicodeError) as e:
            raise HttpRequestError(f"request cannot be written: {_h11_text(e)}") from None
        self._head = bytearray()  # the head's bytes so far, for messages only
        self._received = 0
        self._response: h11.Response | None = None
        self._length: int | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._chunks = 0
        self._done: HttpResponse | None = None

    def feed(self, data: bytes) -> HttpResponse | None:
        """Bytes received (``b""``: the server closed); the response once whole, else None."""
        if self._done is not None:
            return self._done
        self._received += len(data)
        if self._max_body is not None and self._received > (wire := self._max_head + 2 * self._max_body):
            raise ReplyTooLarge(f"reply larger than {wire} bytes received, {self._body_size} of them body")
        if self._response is None and len(self._head) <= self._max_head:
            self._head += data[: self._max_head + 1 - len(self._head)]
        self._conn.receive_data(data)
        try:
            return self._events()
        except h11.ProtocolError as e:
            raise self._error(e, closed=not data) from None

    def _events(self) -> HttpResponse | None:
        while True:
            event = self._conn.next_event()
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Response):
                self._start(event)
            elif isinstance(event, h11.Data):
                self._chunks += event.chunk_start
                if self._chunks > MAX_CHUNKS:
                    raise HttpReplyError(f"chunked body in more than {MAX_CHUNKS} chunks")
                self._body_size += len(event.data)
                if self._max_body is not None and self._body_size > self._max_body:
                    raise ReplyTooLarge(f"reply larger than {self._max_body} bytes")
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                r = self._response
                assert r is not None  # h11 ends a message only after its Response
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in r.headers}
                self._done = HttpResponse(r.status_code, headers, b"".join(self._body))
                return self._done
            elif not isinstance(event, h11.InformationalResponse):  # 1xx: the real response follows
                raise HttpReplyError(f"unexpected {type(event).__name__} in a response")

    def _start(self, r: h11.Response) -> None:
        self._response = r
        for k, v in r.headers:
            if k == b"content-length":
                self._length = int(v)
        if self._length is not None and self._max_body is not None and self._length > self._max_body:
            raise ReplyTooLarge(f"reply larger than {self._max_body} bytes (Content-Length {self._length})")

    def _error(self, e: h11.ProtocolError, closed: bool) -> HttpReplyError:
        """h11's error as ours, naming the part of the response it was in."""
        text = _h11_text(e)
        if self._response is None:
            if closed:
                return HttpReplyError(f"response head incomplete after {self._received} bytes")
            if text == "Receive buffer too long":
                return HttpReplyError(f"response head larger than {self._max_head} bytes")
            first = bytes(self._head.split(b"\r\n", 1)[0])
            if text.startswith(("illegal status line", "illegal request line", "no response line")):
                return HttpReplyError(f"bad status line {first[:80]!r}")
            if "Content-Length" in text:
                values = re.findall(rb"(?im)^content-length:[ \t]*(.*?)[ \t]*\r?$", bytes(self._head))
                shown = ", ".join(v.decode("latin-1") for v in values)
                return HttpReplyError(f"{text} {shown[:20]!r}")
            return HttpReplyError(f"bad response head: {text}")
        if closed:
            if self._length is not None:
                return HttpReplyError(f"body truncated: {self._body_size} of {self._length} bytes")
            return HttpReplyError(f"chunked body truncated after {self._body_size} bytes")
        if text == "Receive buffer too long":
            return HttpReplyError(f"chunked body: a chunk line longer than {self._max_head} bytes")
        return HttpReplyError(f"bad chunked body: {text}")


def _h11_text(e: Exception) -> str:
    """h11's message on one line, with its ``bytearray(b'...')`` shown as ``b'...'``."""
    return one_line(re.sub(r"bytearray\((b['\"].*?['\"])\)", r"\1", str(e)), 200)


def request_bytes(host_header: str, target: str) -> bytes:
    """A GET request that asks the server to close after replying."""
    return ResponseReader(host_header, target).request


def parse_response(raw: bytes, max_body: int | None = None) -> HttpResponse:
    """Parse a whole response read until the server closed.

    Raises ``HttpReplyError`` for a truncated or malformed response.
    """
    reader = ResponseReader("tracker", "/", max_body)
    got = reader.feed(raw) or reader.feed(b"")
    assert got is not None  # at the close, h11 gives the whole response or an error (never NEED_DATA)
    return got
