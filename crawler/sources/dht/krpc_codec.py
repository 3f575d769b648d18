"""KRPC (BEP 5) ``get_peers`` with BEP 33's scrape, sans-IO: queries to bytes, replies to frozen values.

What goes out: ``get_peers`` (``scrape=1`` asks a node that stores peers
for the info-hash to add its two bloom filters, ``crawler.sources.dht.dht_bloom``)
and ``announce_peer`` (the tests fill libtorrent nodes with it). Queries
carry ``ro=1`` (BEP 43): a read-only node is answered but never put in
anyone's routing table, as the crawler's libtorrent node is.

What comes in: one datagram, read by ``decode`` into a ``Response`` (``y``
is ``r``) or an ``ErrorReply`` (``y`` is ``e``), or refused with
``KrpcError`` and a one-line message; nothing else escapes. The bytes are
untrusted, so the decode is bounded:

- At most ``MAX_DATAGRAM`` bytes (no UDP payload is longer), and at most
  ``REPLY_MAX_VALUES`` bencoded values (a real reply holds under 150: about
  20 keys and libtorrent's 100 ``values`` at most); past either the
  datagram is refused, so a reply of many tiny values costs a bounded time.
- What is kept is what ``_SCHEMA`` names: every other key is checked and
  skipped without being built, ``values`` only counted. ``nodes`` (26-byte
  IPv4 entries: id, address, port) and ``nodes6`` (38-byte IPv6 entries,
  BEP 32) keep their first ``MAX_NODES`` entries (a node sends K = 8); the
  rest of a longer list is dropped unread, so a node cannot flood a lookup
  with candidates. Entries with port 0 are dropped (nobody answers there).
- Refused: a length of ``nodes``/``nodes6`` that is not a multiple of the
  entry size, a filter that is not exactly 256 bytes, an id that is not 20
  bytes, a transaction id or token past ``MAX_TRANSACTION_ID`` /
  ``MAX_TOKEN`` bytes, fields of the wrong type, and queries (we answer
  none).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from crawler.bencode import codec as bencode
from crawler.errors import RemoteProtocolError, one_line
from crawler.sources.dht.dht_bloom import SIZE as FILTER_SIZE

MAX_DATAGRAM = 65_535
REPLY_MAX_VALUES = 2_000
MAX_NODES = 16
# libtorrent sends 2-byte transaction ids and 4-byte tokens (Transmission 4
# and 8); 32 and 64 leave room for any honest implementation.
MAX_TRANSACTION_ID = 32
MAX_TOKEN = 64
NODE_ENTRY = {socket.AF_INET: 26, socket.AF_INET6: 38}


class KrpcError(RemoteProtocolError):
    """A KRPC datagram is malformed, or not a reply; the message says how."""


@dataclass(frozen=True)
class Node:
    """A contact from a ``nodes`` or ``nodes6`` list: its id, address (canonical text) and port."""
    node_id: bytes
    ip: str
    port: int


@dataclass(frozen=True)
class Response:
    """A KRPC reply (``y`` = ``r``), as a ``get_peers`` scrape needs it.

    ``values``: how many peers the reply listed (not kept). ``seeds_filter``
    (``BFsd``) and ``peers_filter`` (``BFpe``): 256 bytes each, or None where
    the reply had none (a node storing nothing for the hash sends neither).
    """
    transaction_id: bytes
    node_id: bytes
    nodes: tuple[Node, ...] = ()
    nodes6: tuple[Node, ...] = ()
    values: int = 0
    seeds_filter: bytes | None = None
    peers_filter: bytes | None = None
    token: bytes | None = None


@dataclass(frozen=True)
class ErrorReply:
    """A KRPC error (``y`` = ``e``): BEP 5's code (201 generic, 202 server, 203 protocol, 204 method) and text."""
    transaction_id: bytes
    code: int
    message: str


# --- queries -------------------------------------------------------------------------


def _twenty(value: bytes, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != 20:
        raise ValueError(f"{what} must be 20 bytes")
    return value


def get_peers(transaction_id: bytes, node_id: bytes, info_hash: bytes, *, scrape: bool = True,
              noseed: bool = False, want: Iterable[str] = (), read_only: bool = True) -> bytes:
    """A ``get_peers`` query; ``want``: ``"n4"``/``"n6"`` (BEP 32; an empty iterable sends no ``want``).

    Raises ``ValueError`` for ids that are not 20 bytes or an unknown ``want``.
    """
    args: dict = {b"id": _twenty(node_id, "node id"), b"info_hash": _twenty(info_hash, "info-hash")}
    if scrape:
        args[b"scrape"] = 1
    if noseed:
        args[b"noseed"] = 1
    wants = list(want)
    if any(w not in ("n4", "n6") for w in wants):
        raise ValueError(f"want holds n4 and n6 only, not {wants!r}")
    if wants:
        args[b"want"] = wants
    return _query(transaction_id, b"get_peers", args, read_only)


def announce_peer(transaction_id: bytes, node_id: bytes, info_hash: bytes, port: int, token: bytes, *,
                  seed: bool = False, implied_port: bool = False, read_only: bool = True) -> bytes:
    """An ``announce_peer`` query (BEP 5; ``seed``: BEP 33), with the ``token`` a ``get_peers`` gave.

    Raises ``ValueError`` for ids that are not 20 bytes or a port outside 0-65535.
    """
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is outside 0-65535")
    args: dict = {b"id": _twenty(node_id, "node id"), b"info_hash": _twenty(info_hash, "info-hash"),
                  b"port": port, b"token": bytes(token)}
    if seed:
        args[b"seed"] = 1
    if implied_port:
        args[b"implied_port"] = 1
    return _query(transaction_id, b"announce_peer", args, read_only)


def _query(transaction_id: bytes, name: bytes, args: dict, read_only: bool) -> bytes:
    if not 0 < len(transaction_id) <= MAX_TRANSACTION_ID:
        raise ValueError(f"a transaction id has 1-{MAX_TRANSACTION_ID} bytes")
    message: dict[bytes, object] = {b"t": bytes(transaction_id), b"y": b"q", b"q": name, b"a": args}
    if read_only:
        message[b"ro"] = 1
    return bencode.encode(message)


# --- replies, as a node sends them (tests' nodes) ---------------------------------------


def compact_nodes(nodes: Iterable[Node], family: int = socket.AF_INET) -> bytes:
    """The ``nodes`` (AF_INET) or ``nodes6`` (AF_INET6) string of ``nodes``."""
    kind = ipaddress.IPv4Address if family == socket.AF_INET else ipaddress.IPv6Address
    return b"".join(_twenty(n.node_id, "node id") + kind(n.ip).packed + struct.pack(">H", n.port) for n in nodes)


def response(reply: Response, values: Iterable[bytes] = ()) -> bytes:
    """The datagram of ``reply``; ``values``: the compact peers it lists (``reply.values`` is not used)."""
    r: dict = {b"id": reply.node_id}
    if reply.nodes:
        r[b"nodes"] = compact_nodes(reply.nodes)
    if reply.nodes6:
        r[b"nodes6"] = compact_nodes(reply.nodes6, socket.AF_INET6)
    listed = list(values)
    if listed:
        r[b"values"] = listed
    for key, value in ((b"BFsd", reply.seeds_filter), (b"BFpe", reply.peers_filter), (b"token", reply.token)):
        if value is not None:
            r[key] = value
    return bencode.encode({b"t": reply.transaction_id, b"y": b"r", b"r": r})


def error(reply: ErrorReply) -> bytes:
    """The datagram of ``reply``."""
    return bencode.encode({b"t": reply.transaction_id, b"y": b"e", b"e": [reply.code, reply.message]})


# --- decoding --------------------------------------------------------------------------

_LEAF = bencode.LEAF
_SCHEMA = bencode.Keys({
    b"t": _LEAF, b"y": _LEAF, b"e": bencode.Items(_LEAF, 2),
    b"r": bencode.Keys({b"id": _LEAF, b"nodes": _LEAF, b"nodes6": _LEAF, b"token": _LEAF,
                        b"BFsd": _LEAF, b"BFpe": _LEAF, b"values": bencode.Items(bencode.SKIP, 0)}),
})


def decode(data: bytes) -> Response | ErrorReply:
    """The reply in one datagram. Raises ``KrpcError`` (one line) for anything else."""
    if len(data) > MAX_DATAGRAM:
        raise KrpcError(f"datagram of {len(data):,} bytes, more than {MAX_DATAGRAM:,}")
    try:
        message = bencode.decode(bytes(data), _SCHEMA, max_values=REPLY_MAX_VALUES)
    except bencode.BencodeError as e:
        raise KrpcError(f"not one bencoded message: {e}") from None
    if not isinstance(message, dict):
        raise KrpcError("the message is not a dictionary")
    tid = message.get(b"t")
    if not isinstance(tid, bytes) or not 0 < len(tid) <= MAX_TRANSACTION_ID:
        raise KrpcError(f"no transaction id of 1-{MAX_TRANSACTION_ID} bytes")
    kind = message.get(b"y")
    if kind == b"r":
        return _response(tid, message.get(b"r"))
    if kind == b"e":
        return _error(tid, message.get(b"e"))
    if kind == b"q":
        raise KrpcError("a query, not a reply")
    raise KrpcError(f"message type {_shown(kind)} is neither r nor e")


def _shown(value: object) -> str:
    return one_line(repr(value) if isinstance(value, (bytes, int)) else "of another kind", 60)


def _response(tid: bytes, r: object) -> Response:
    if not isinstance(r, dict):
        raise KrpcError("reply without an r dictionary")
    node_id = r.get(b"id")
    if not isinstance(node_id, bytes) or len(node_id) != 20:
        raise KrpcError("reply without a 20-byte node id")
    token = r.get(b"token")
    if token is not None and (not isinstance(token, bytes) or len(token) > MAX_TOKEN):
        raise KrpcError(f"token is not a string of at most {MAX_TOKEN} bytes")
    values = r.get(b"values")
    if values is not None and not isinstance(values, bencode.Cut):
        raise KrpcError("values is not a list")
    return Response(
        transaction_id=tid, node_id=node_id,
        nodes=_nodes(r.get(b"nodes"), socket.AF_INET), nodes6=_nodes(r.get(b"nodes6"), socket.AF_INET6),
        values=0 if values is None else values.cut,
        seeds_filter=_filter(r.get(b"BFsd"), "BFsd"), peers_filter=_filter(r.get(b"BFpe"), "BFpe"),
        token=token,
    )


def _filter(value: object, name: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, bytes) or len(value) != FILTER_SIZE:
        size = f"{len(value)} bytes" if isinstance(value, bytes) else "not a string"
        raise KrpcError(f"{name} is {size}, not a {FILTER_SIZE}-byte bloom filter")
    return value


def _nodes(value: object, family: int) -> tuple[Node, ...]:
    if value is None:
        return ()
    name, size = ("nodes", 26) if family == socket.AF_INET else ("nodes6", 38)
    if not isinstance(value, bytes):
        raise KrpcError(f"{name} is not a string")
    if len(value) % size:
        raise KrpcError(f"{name} of {len(value)} bytes is not a multiple of {size}")
    out = []
    for off in range(0, min(len(value), MAX_NODES * size), size):
        (port,) = struct.unpack_from(">H", value, off + size - 2)
        if port:
            packed = value[off + 20 : off + size - 2]
            # ipaddress's text for IPv6, as crawler.sources.trackers.peers writes it
            ip = socket.inet_ntop(family, packed) if size == 26 else str(ipaddress.IPv6Address(packed))
            out.append(Node(value[off : off + 20], ip, port))
    return tuple(out)


def _error(tid: bytes, e: object) -> ErrorReply:
    if not isinstance(e, bencode.Cut) or len(e) != 2 or e.cut:
        raise KrpcError("error reply whose e is not a list of a code and a message")
    code, text = e
    if not isinstance(code, int) or not isinstance(text, bytes):
        raise KrpcError("error reply whose e is not a list of a code and a message")
    return ErrorReply(tid, code, one_line(text.decode("utf-8", "replace"), 200))
