"""Bencode (BEP 3), sans-IO: bytes in, Python values out, and back.

Used for HTTP tracker replies (``crawler.sources.http_codec``) and for
``.torrent`` files. The decoder is strict because its input is untrusted:
the whole input must be exactly one value (no trailing bytes), integers have
no leading zeros and no ``-0`` and at most ``MAX_INT_DIGITS`` digits (Python
refuses to convert more than 4,300 and the work is quadratic), string lengths
are bounded by what is left of the input, and nesting depth is bounded so a
hostile reply cannot exhaust the stack. Only ASCII digits count as digits. Dictionary keys need not be sorted (real trackers emit unsorted keys)
but must be byte strings and unique.

Values: ``int``, ``bytes``, ``list``, ``dict`` with ``bytes`` keys. ``encode``
also accepts ``str`` (encoded as UTF-8) and ``tuple`` for convenience, and
sorts dictionary keys as BEP 3 requires.
"""

from __future__ import annotations

from crawler.errors import RemoteProtocolError

# Deeper nesting than this is never seen in trackers' replies or .torrent
# files; it keeps the recursive decoder far from Python's recursion limit.
MAX_DEPTH = 64
# The largest integers real bencode holds are 64-bit sizes (20 digits); 64
# digits leave room for any 128- or 192-bit value and stay far below
# Python's int-conversion limit of 4,300 digits.
MAX_INT_DIGITS = 64


class BencodeError(RemoteProtocolError):
    """The bytes are not one well-formed bencoded value; the message says why and where."""


def decode(data: bytes) -> object:
    """Decode exactly one bencoded value from ``data``.

    Returns int, bytes, list or dict (bytes keys). Raises ``BencodeError``
    naming the offset and the fault for anything malformed, including bytes
    after the value.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("bencode.decode wants bytes")
    data = bytes(data)
    if not data:
        raise BencodeError("empty input")
    value, end = _decode(data, 0, 0)
    if end != len(data):
        raise BencodeError(f"{len(data) - end} trailing bytes after the value at offset {end}")
    return value


def decode_prefix(data: bytes, start: int = 0) -> tuple[object, int]:
    """Decode one value starting at ``start``; return it and the offset after it.

    For callers that need the raw span of a value (the ``info`` dictionary of a
    .torrent, whose SHA-1 is the info-hash). Raises ``BencodeError``.
    """
    data = bytes(data)
    if start >= len(data):
        raise BencodeError(f"no value at offset {start}")
    return _decode(data, start, 0)


def _decode(data: bytes, i: int, depth: int) -> tuple[object, int]:
    if depth > MAX_DEPTH:
        raise BencodeError(f"nesting deeper than {MAX_DEPTH} at offset {i}")
    if i >= len(data):
        raise BencodeError(f"truncated: value expected at offset {i}")
    c = data[i]
    if c == 0x69:  # i
        return _int(data, i)
    if 0x30 <= c <= 0x39:  # digit: a string
        return _bytes(data, i)
    if c == 0x6C:  # l
        return _list(data, i + 1, depth)
    if c == 0x64:  # d
        return _dict(data, i + 1, depth)
    raise BencodeError(f"unexpected byte {bytes([c])!r} at offset {i}")


def _list(data: bytes, i: int, depth: int) -> tuple[list, int]:
    """The items of a list whose ``l`` is at ``i - 1``, up to its ``e``."""
    out: list = []
    size = len(data)
    while True:
        if i >= size:
            raise BencodeError(f"truncated: list not closed at offset {i}")
        if data[i] == 0x65:  # e
            return out, i + 1
        v, i = _decode(data, i, depth + 1)
        out.append(v)


def _dict(data: bytes, i: int, depth: int) -> tuple[dict, int]:
    """The entries of a dictionary whose ``d`` is at ``i - 1``, up to its ``e``."""
    d: dict = {}
    size = len(data)
    while True:
        if i >= size:
            raise BencodeError(f"truncated: dictionary not closed at offset {i}")
        if data[i] == 0x65:  # e
            return d, i + 1
        if not 0x30 <= data[i] <= 0x39:
            raise BencodeError(f"dictionary key at offset {i} is not a byte string")
        k, i = _bytes(data, i)
        if k in d:
            raise BencodeError(f"duplicate dictionary key {k[:40]!r} before offset {i}")
        v, i = _decode(data, i, depth + 1)
        d[k] = v


def _digits(data: bytes, start: int, end: int, what: str) -> int:
    """Parse data[start:end] as a canonical decimal (optional '-')."""
    s = data[start:end]
    neg = s[:1] == b"-"
    body = s[1:] if neg else s
    if not body or not body.isdigit():  # bytes.isdigit is ASCII-only
        raise BencodeError(f"{what} at offset {start} is not a decimal number: {s[:24]!r}")
    if len(body) > MAX_INT_DIGITS:
        raise BencodeError(f"{what} at offset {start} has {len(body)} digits, more than {MAX_INT_DIGITS}")
    if len(body) > 1 and body[:1] == b"0":
        raise BencodeError(f"{what} at offset {start} has a leading zero")
    if neg and body == b"0":
        raise BencodeError(f"{what} at offset {start} is -0")
    return -int(body) if neg else int(body)


def _int(data: bytes, i: int) -> tuple[int, int]:
    end = data.find(b"e", i + 1)
    if end < 0:
        raise BencodeError(f"truncated: integer at offset {i} has no 'e'")
    return _digits(data, i + 1, end, "integer"), end + 1


def _bytes(data: bytes, i: int) -> tuple[bytes, int]:
    colon = data.find(b":", i)
    if colon < 0:
        raise BencodeError(f"truncated: string length at offset {i} has no ':'")
    n = _digits(data, i, colon, "string length")
    if n < 0:
        raise BencodeError(f"string length at offset {i} is negative")
    start = colon + 1
    if start + n > len(data):
        raise BencodeError(f"truncated: string at offset {i} wants {n} bytes, {len(data) - start} left")
    return data[start : start + n], start + n


def encode(obj: object) -> bytes:
    """Bencode ``obj`` (int, bytes, str, list/tuple, dict with bytes/str keys).

    Dictionary keys are sorted as raw bytes. Raises ``TypeError`` for anything
    else (a bool, a float, None): that is our fault, not the remote side's.
    """
    out: list[bytes] = []
    _encode(obj, out)
    return b"".join(out)


def _encode(obj: object, out: list[bytes]) -> None:
    if isinstance(obj, bool):
        raise TypeError("bencode cannot encode a bool")
    if isinstance(obj, int):
        out.append(b"i%de" % obj)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        b = bytes(obj)
        out.append(b"%d:" % len(b))
        out.append(b)
    elif isinstance(obj, str):
        _encode(obj.encode("utf-8"), out)
    elif isinstance(obj, (list, tuple)):
        out.append(b"l")
        for v in obj:
            _encode(v, out)
        out.append(b"e")
    elif isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if isinstance(k, str):
                k = k.encode("utf-8")
            if not isinstance(k, (bytes, bytearray)):
                raise TypeError(f"bencode dictionary key must be bytes or str, not {type(k).__name__}")
            items.append((bytes(k), v))
        items.sort(key=lambda kv: kv[0])
        out.append(b"d")
        for k, v in items:
            _encode(k, out)
            _encode(v, out)
        out.append(b"e")
    else:
        raise TypeError(f"bencode cannot encode {type(obj).__name__}")
