"""The one-pass bencode reader behind ``crawler.bencode.codec.decode``: the checks, the budget, the schema walk.

``Reader`` reads one input: ``read`` a value as a schema keeps it
(``crawler.bencode.schema``), ``keep`` one whole, ``skip`` one checked
without building anything. Every value it reads, kept or not, counts
against its budget; past it, ``TooManyValues``. Why it is built so, and
the budgets: ``crawler.bencode.codec``'s docstring.
"""

from __future__ import annotations

import re
from typing import NoReturn

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
)
from crawler.errors import RemoteProtocolError

# Deeper nesting than this is never seen in trackers' replies or .torrent
# files; it keeps the recursive decoder far from Python's recursion limit.
MAX_DEPTH = 64
# The largest integers real bencode holds are 64-bit sizes (20 digits); 64
# digits leave room for any 128- or 192-bit value and stay far below
# Python's int-conversion limit of 4,300 digits.
MAX_INT_DIGITS = 64

_I, _L, _D, _E = 0x69, 0x6C, 0x64, 0x65
# A canonical string length with its colon, an integer's body with its "e":
# one C call checks what the slower path below explains when it fails.
_LEN = re.compile(rb"(?:0|[1-9][0-9]{0,%d}):" % (MAX_INT_DIGITS - 1))
_INT = re.compile(rb"(?:0|-?[1-9][0-9]{0,%d})e" % (MAX_INT_DIGITS - 1))


class BencodeError(RemoteProtocolError):
    """The bytes are not one well-formed bencoded value; the message says why and where."""


class TooManyValues(BencodeError):
    """The input holds more values than the decoder's budget (``limit``); ``offset``: where it ran out."""

    def __init__(self, limit: int, offset: int):
        super().__init__(f"more than {limit:,} values (the budget ran out at offset {offset})")
        self.limit, self.offset = limit, offset


class Reader:
    """One decode: the input, and the values it may still read."""

    __slots__ = ("data", "size", "left", "limit")

    def __init__(self, data: bytes, limit: int):
        self.data, self.size, self.left, self.limit = data, len(data), limit, limit

    def read(self, i: int, schema: object, depth: int) -> tuple[object, int]:
        """The value at ``i`` as ``schema`` keeps it, and the offset after it."""
        if i >= self.size:
            raise BencodeError(f"truncated: value expected at offset {i}")
        c = self.data[i]
        kind = type(schema)
        if c != _L and c != _D:  # a string or integer (or a byte that starts no value)
            if schema is SKIP or kind is Each:
                return (INTEGER if c == _I else STRING), self.skip(i, depth)
            return self.keep(i, depth)
        if schema is KEEP:
            return self.keep(i, depth)
        if c == _L:
            if type(schema) is Items:
                return self.items(i, schema, depth)
            if type(schema) is Each:
                return None, self.each(i, schema, depth)
            return LIST, self.skip(i, depth)
        if type(schema) is Keys:
            return self.keys(i, schema, depth)
        return DICTIONARY, self.skip(i, depth)

    def keep(self, i: int, depth: int) -> tuple[object, int]:
        """The whole value at ``i`` (``i`` within the input), decoded."""
        data = self.data
        c = data[i]
        self.left -= 1
        if self.left < 0:
            raise TooManyValues(self.limit, i)
        if 0x30 <= c <= 0x39:
            m = _LEN.match(data, i)
            if m is None:
                _bad_length(data, i)
            start = m.end()
            end = start + int(data[i : start - 1])
            if end > self.size:
                raise _short_string(data, i, start, end)
            return data[start:end], end
        if c == _I:
            m = _INT.match(data, i + 1)
            if m is None:
                _bad_integer(data, i)
            end = m.end()
            return int(data[i + 1 : end - 1]), end
        if depth > MAX_DEPTH and (c == _L or c == _D):
            raise _too_deep(i)
        if c == _L:
            return self._list(i + 1, depth + 1)
        if c == _D:
            return self._dict(i + 1, depth + 1)
        raise BencodeError(f"unexpected byte {bytes([c])!r} at offset {i}")

    def _list(self, i: int, inner: int) -> tuple[list, int]:
        """The items of a list whose ``l`` is at ``i - 1``, kept whole, up to its ``e``."""
        data, size, keep = self.data, self.size, self.keep
        out: list = []
        append = out.append
        while True:
            if i >= size:
                raise BencodeError(f"truncated: list not closed at offset {i}")
            if data[i] == _E:
                return out, i + 1
            v, i = keep(i, inner)
            append(v)

    def _dict(self, i: int, inner: int) -> tuple[dict, int]:
        """The entries of a dictionary whose ``d`` is at ``i - 1``, kept whole, up to its ``e``."""
        data, size, keep, key = self.data, self.size, self.keep, self.key
        d: dict = {}
        while True:
            if i >= size:
                raise BencodeError(f"truncated: dictionary not closed at offset {i}")
            c = data[i]
            if c == _E:
                return d, i + 1
            k, i = key(i, c)
            if k in d:
                raise BencodeError(f"duplicate dictionary key {k[:40]!r} before offset {i}")
            if i >= size:
                raise BencodeError(f"truncated: value expected at offset {i}")
            d[k], i = keep(i, inner)

    def keys(self, i: int, schema: Keys, depth: int) -> tuple[dict, int]:
        """The dictionary at ``i`` as ``schema`` keeps it."""
        if depth > MAX_DEPTH:
            raise _too_deep(i)
        self.left -= 1
        if self.left < 0:
            raise TooManyValues(self.limit, i)
        data, size, fields, spans = self.data, self.size, schema.fields, schema.spans
        keep, skip, read, inner = self.keep, self.skip, self.read, depth + 1
        found: dict[bytes, tuple[int, int]] = {}  # the spans asked for, the Record's
        out: dict = Record() if spans else {}
        if isinstance(out, Record):
            out.spans = found
        i += 1
        while True:
            if i >= size:
                raise BencodeError(f"truncated: dictionary not closed at offset {i}")
            c = data[i]
            if c == _E:
                return out, i + 1
            k, i = self.key(i, c)
            sub = fields.get(k, _OTHER)
            if sub is _OTHER:
                i = skip(i, inner)
            elif k in out:
                raise BencodeError(f"duplicate dictionary key {k[:40]!r} before offset {i}")
            elif sub is LEAF and i < size and data[i] != _L and data[i] != _D:
                out[k], i = keep(i, inner)
            else:
                start = i
                out[k], i = read(i, sub, inner)
                if k in spans:
                    found[k] = (start, i)

    def key(self, i: int, c: int) -> tuple[bytes, int]:
        """The dictionary key at ``i`` (``c``: its first byte), and the offset after it."""
        data = self.data
        m = _LEN.match(data, i)
        if m is None:
            if not 0x30 <= c <= 0x39:
                raise BencodeError(f"dictionary key at offset {i} is not a byte string")
            _bad_length(data, i)
        self.left -= 1
        if self.left < 0:
            raise TooManyValues(self.limit, i)
        start = m.end()
        end = start + int(data[i : start - 1])
        if end > self.size:
            raise _short_string(data, i, start, end)
        return data[start:end], end

    def items(self, i: int, schema: Items, depth: int) -> tuple[Cut, int]:
        """The list at ``i`` as ``schema`` keeps it."""
        if depth > MAX_DEPTH:
            raise _too_deep(i)
        self.left -= 1
        if self.left < 0:
            raise TooManyValues(self.limit, i)
        data, size, item = self.data, self.size, schema.item
        read, skip, inner = self.read, self.skip, depth + 1
        limit = size if schema.limit is None else schema.limit  # an item takes a byte at least
        out = Cut()
        append = out.append
        n = 0
        i += 1
        while True:
            if i >= size:
                raise BencodeError(f"truncated: list not closed at offset {i}")
            if data[i] == _E:
                out.cut = max(0, n - limit)
                return out, i + 1
            if n < limit:
                v, i = read(i, item, inner)
                append(v)
            else:
                i = skip(i, inner)
            n += 1

    def each(self, i: int, schema: Each, depth: int) -> int:
        """Hand the items of the list at ``i`` on as ``schema`` says; the offset after the list."""
        if depth > MAX_DEPTH:
            raise _too_deep(i)
        self.left -= 1
        if self.left < 0:
            raise TooManyValues(self.limit, i)
        data, size, to = self.data, self.size, schema.to
        i += 1
        while True:
            if i >= size:
                raise BencodeError(f"truncated: list not closed at offset {i}")
            c = data[i]
            if c == _E:
                return i + 1
            if isinstance(to, Each) and c == _L:
                i = self.each(i, to, depth + 1)
            elif not isinstance(to, Each) and (c == _I or 0x30 <= c <= 0x39):
                v, i = self.keep(i, depth + 1)
                to(v)
            else:
                i = self.skip(i, depth + 1)

    def skip(self, i: int, depth: int) -> int:
        """Check the value at ``i`` without building anything; the offset after it.

        A loop over the bytes with a stack of the open containers, so a
        skipped value costs no recursion. The keys of a skipped dictionary are
        checked to be strings, not to be unique: none of its values is used.
        """
        data = self.data
        if i < self.size and (0x30 <= data[i] <= 0x39 or data[i] == _I):  # a string or integer: no stack
            self.left -= 1
            if self.left < 0:
                raise TooManyValues(self.limit, i)
            return _leaf_end(data, i, data[i], False)
        return self._skip_nested(i, depth)

    def _skip_nested(self, i: int, depth: int) -> int:
        """``skip`` of anything but a lone string or integer."""
        data, size, left = self.data, self.size, self.left
        stack: list[bool] = []  # the open containers, True for a dictionary
        key_next = False  # in a dictionary: a key comes next
        while True:
            if i >= size:
                raise _truncated(i, stack, key_next)
            c = data[i]
            if c == _E and stack and (key_next or not stack[-1]):
                stack.pop()
                i += 1
                if not stack:
                    self.left = left
                    return i
                key_next = stack[-1]
                continue
            left -= 1
            if left < 0:
                raise TooManyValues(self.limit, i)
            if c == _L or c == _D:
                if key_next:
                    raise BencodeError(f"dictionary key at offset {i} is not a byte string")
                if depth + len(stack) > MAX_DEPTH:
                    raise _too_deep(i)
                stack.append(c == _D)
                key_next = c == _D
                i += 1
                continue
            i = _leaf_end(data, i, c, key_next)
            if not stack:
                self.left = left
                return i
            if stack[-1]:
                key_next = not key_next


def _leaf_end(data: bytes, i: int, c: int, key: bool) -> int:
    """The offset after the string or integer at ``i`` (``c``: its first byte; ``key``: it must be a string)."""
    if 0x30 <= c <= 0x39:
        m = _LEN.match(data, i)
        if m is None:
            _bad_length(data, i)
        start = m.end()
        end = start + int(data[i : start - 1])
        if end > len(data):
            raise _short_string(data, i, start, end)
        return end
    if key:
        raise BencodeError(f"dictionary key at offset {i} is not a byte string")
    if c == _I:
        m = _INT.match(data, i + 1)
        if m is None:
            _bad_integer(data, i)
        return m.end()
    raise BencodeError(f"unexpected byte {bytes([c])!r} at offset {i}")


_OTHER = object()


def _too_deep(i: int) -> BencodeError:
    return BencodeError(f"nesting deeper than {MAX_DEPTH} at offset {i}")


def _truncated(i: int, stack: list[bool], key_next: bool) -> BencodeError:
    """The error of input that ends at ``i`` inside a skipped value."""
    if not stack or (stack[-1] and not key_next):
        return BencodeError(f"truncated: value expected at offset {i}")
    return BencodeError(f"truncated: {'dictionary' if stack[-1] else 'list'} not closed at offset {i}")


def _short_string(data: bytes, i: int, start: int, end: int) -> BencodeError:
    return BencodeError(f"truncated: string at offset {i} wants {end - start} bytes, {len(data) - start} left")


def _digits(data: bytes, start: int, end: int, what: str) -> NoReturn:
    """Raise the ``BencodeError`` saying why data[start:end] is not a canonical decimal (optional '-')."""
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
    raise BencodeError(f"{what} at offset {start} is malformed: {s[:24]!r}")


def _bad_integer(data: bytes, i: int) -> NoReturn:
    """Raise the error of an integer at ``i`` that ``_INT`` refused."""
    end = data.find(b"e", i + 1)
    if end < 0:
        raise BencodeError(f"truncated: integer at offset {i} has no 'e'")
    _digits(data, i + 1, end, "integer")


def _bad_length(data: bytes, i: int) -> NoReturn:
    """Raise the error of a string length at ``i`` that ``_LEN`` refused."""
    colon = data.find(b":", i)
    if colon < 0:
        raise BencodeError(f"truncated: string length at offset {i} has no ':'")
    _digits(data, i, colon, "string length")
