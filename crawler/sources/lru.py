"""A bounded mapping that forgets the least recently used entry: the per-process caches' one home.

The tracker side keeps several caches keyed by tracker URL, host or address
(DNS answers, the address that answered, UDP connection ids, tracker health).
A torrent may name any tracker, so every such cache is an ``Lru``: past
``maxsize`` entries the one used longest ago is dropped, and a dropped entry
only costs the work it saved (a DNS query, a connect, a Redis read).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
_MISSING = object()


class Lru(Generic[K, V]):
    """A dict of at most ``maxsize`` entries; reads and writes make an entry the most recent."""

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError("an LRU needs room for at least one entry")
        self.maxsize = maxsize
        self._d: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        value = self._d.get(key, _MISSING)
        if value is _MISSING:
            return default
        self._d.move_to_end(key)
        return value

    def __getitem__(self, key: K) -> V:
        value = self._d[key]
        self._d.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.maxsize:
            self._d.popitem(last=False)

    def pop(self, key: K, default=None):
        """Remove ``key`` and return its value, or ``default``."""
        return self._d.pop(key, default)

    def __delitem__(self, key: K) -> None:
        del self._d[key]

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._d))

    def clear(self) -> None:
        """Forget every entry."""
        self._d.clear()
