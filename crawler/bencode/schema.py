"""What a bencode decode keeps (``crawler.bencode.codec``): the schema vocabulary and its results.

A schema is one of ``KEEP`` (the whole value), ``LEAF`` (an integer or
string; a container is skipped), ``SKIP`` (nothing), ``Keys`` (some keys of
a dictionary), ``Items`` (the first items of a list) or ``Each`` (a list's
strings and integers handed to a function). What was checked but not kept
is a ``Skipped`` where the caller may look; ``Items`` gives a ``Cut``, and
``Keys`` that asks for spans a ``Record``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


class Skipped:
    """A value that was checked but not kept; ``kind`` says what it was."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


INTEGER, STRING, LIST, DICTIONARY = (Skipped(k) for k in ("integer", "string", "list", "dictionary"))


class Cut(list):
    """The items of a list that an ``Items`` schema kept; ``cut``: how many after them were not."""

    __slots__ = ("cut",)
    cut: int


class Record(dict):
    """The kept keys of a dictionary read by ``Keys``; ``spans[key]``: the offsets of the keys it asked spans of."""

    __slots__ = ("spans",)
    spans: dict[bytes, tuple[int, int]]


class _Mark:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


KEEP = _Mark("KEEP")  # the whole value, decoded
LEAF = _Mark("LEAF")  # an integer or string, decoded; a list or dictionary: Skipped
SKIP = _Mark("SKIP")  # nothing kept: Skipped


@dataclass(frozen=True)
class Keys:
    """A dictionary: the keys of ``fields`` kept, each read by its own schema, every other key only checked.

    ``spans``: keys whose value's offsets (start, end) go to the ``Record``'s
    ``spans``. Not a dictionary: a list is ``Skipped``, an integer or string kept.
    """

    fields: Mapping[bytes, object]
    spans: frozenset[bytes] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Items:
    """A list: its first ``limit`` items (None: all) read by ``item`` and kept, the rest checked and counted.

    Gives a ``Cut``. Not a list: a dictionary is ``Skipped``, an integer or string kept.
    """

    item: object
    limit: int | None = None


@dataclass(frozen=True)
class Each:
    """A list whose items are each handed on, none kept (the decode gives None here).

    ``to`` is a function, called with each integer or string item in order,
    or another ``Each`` for lists of lists. Items of another kind, and a
    value here that is not a list, are checked and skipped.
    """

    to: Callable[[object], None] | Each
