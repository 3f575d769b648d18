"""Bencode (BEP 3), sans-IO: bytes in, Python values out, and back.

Used for HTTP tracker replies (``crawler.sources.trackers.http_codec``) and for
``.torrent`` files (``crawler.torrents.items``). The input is untrusted, so decoding
is strict and bounded by construction, in one pass over the bytes:

- The whole input is exactly one value (no trailing bytes); integers have no
  leading zeros, no ``-0`` and at most ``MAX_INT_DIGITS`` ASCII digits
  (Python refuses to convert more than 4,300, and the work is quadratic);
  string lengths are bounded by what is left of the input; containers nest
  at most ``MAX_DEPTH`` deep, so the recursion stays far from Python's limit.
  Dictionary keys need not be sorted (real trackers emit unsorted keys) but
  must be byte strings, and a key kept twice in one dictionary is refused.
- Time: every value read counts against a budget (``max_values``): each
  integer, string (dictionary keys included), list and dictionary, kept or
  not. Past it the decoder stops with ``TooManyValues``, so the work is at
  most the budget's, however the bytes are shaped (a value takes two bytes
  at least: a 2 MiB reply could otherwise hold a million).
- Memory: a *schema* says what is kept. ``KEEP`` decodes a whole value;
  ``Keys`` keeps the listed keys of a dictionary and only checks the others;
  ``Items`` keeps the first ``limit`` items of a list and counts the rest;
  ``Each`` hands each string or integer of a list (or of lists in a list) to
  a function and keeps nothing; ``LEAF`` keeps an integer or string but not
  a container; ``SKIP`` keeps nothing. A value checked but not kept is
  walked without building anything (``Skipped`` stands in for it where the
  caller may look). So what a decode holds is what its schema keeps, plus
  the stack of open containers, never a tree of the whole input.

The schema vocabulary is ``crawler.bencode.schema``, the reader that walks
the bytes ``crawler.bencode.reader``; this module is their front.

Budgets, chosen so that no real input meets them and a hostile one costs a
bounded fraction of a second (a value costs some 0.3 us to check, a few
times that to keep, on the machines this runs on):

- ``MAX_VALUES`` (``decode``'s default): 100,000 values. Kept whole, that
  is at most ~10 MB of objects (empty dictionaries, the largest per byte).
- ``.torrent`` files and tracker replies set their own (``crawler.torrents.items``,
  ``crawler.sources.trackers.http_codec``), each explained there.

Values: ``int``, ``bytes``, ``list``, ``dict`` with ``bytes`` keys. ``encode``
also accepts ``str`` (encoded as UTF-8) and ``tuple`` for convenience, and
sorts dictionary keys as BEP 3 requires.
"""

from __future__ import annotations

from crawler.bencode.reader import MAX_DEPTH, MAX_INT_DIGITS, BencodeError, Reader, TooManyValues
from crawler.bencode.schema import (
    DICTIONARY,
    INTEGER,
    KEEP,
    LEAF,
    LIST,
    SKIP,
    STRING,
    Cut,
    Each,
    Items,
    Keys,
    Record,
    Skipped,
)

__all__ = [
    "DICTIONARY", "INTEGER", "KEEP", "LEAF", "LIST", "MAX_DEPTH", "MAX_INT_DIGITS", "MAX_VALUES", "SKIP",
    "STRING", "BencodeError", "Cut", "Each", "Items", "Keys", "Record", "Skipped", "TooManyValues", "decode",
    "decode_prefix", "encode",
]

# The values ``decode`` reads unless told otherwise (see above).
MAX_VALUES = 100_000


def decode(data: bytes, schema: object = KEEP, *, max_values: int = MAX_VALUES) -> object:
    """Decode exactly one bencoded value from ``data``, keeping what ``schema`` says.

    Returns int, bytes, list or dict (bytes keys) under ``KEEP``; under
    other schemas as the schema's docstring says. Raises ``BencodeError``
    naming the offset and the fault for anything malformed, including bytes
    after the value, and ``TooManyValues`` (one) past ``max_values`` values.
    """
    if type(data) is not bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("bencode.decode wants bytes")
        data = bytes(data)
    if not data:
        raise BencodeError("empty input")
    value, end = Reader(data, max_values).read(0, schema, 0)
    if end != len(data):
        raise BencodeError(f"{len(data) - end} trailing bytes after the value at offset {end}")
    return value


def decode_prefix(data: bytes, start: int = 0, *, max_values: int = MAX_VALUES) -> tuple[object, int]:
    """Decode one whole value starting at ``start``; return it and the offset after it.

    Raises ``BencodeError`` (``TooManyValues`` past ``max_values``).
    """
    data = bytes(data)
    if start >= len(data):
        raise BencodeError(f"no value at offset {start}")
    return Reader(data, max_values).read(start, KEEP, 0)


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
