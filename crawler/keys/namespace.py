"""A namespace's keys on its shard layout: the one place a key name is put together.

``NamespaceKeys`` builds every key (``name_key`` in the shard,
``name_home_key`` in the namespace's home); the key groups (``queue_keys`` and the others)
name theirs with it, and ``Keys`` is all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Self

from crawler.keys.placement import shard_of
from crawler.shard_layout import ShardLayout

RESERVED = frozenset({"layout"})


@dataclass(frozen=True)
class NamespaceKeys(ShardLayout):
    """How a key of one namespace and shard is named (module note)."""

    @cached_property
    def prefix(self) -> str:
        """``{<namespace>}`` (the home, and the one shard of a one-shard crawl) or ``{<tag>}`` (made once:
        every key of a visit starts with it)."""
        return "{" + (self.tag or self.namespace) + "}"

    def name_key(self, *parts: str) -> str:
        """The key of ``parts`` in this shard (for the key groups of this package only)."""
        return ":".join((self.prefix,) + parts)

    def name_home_key(self, *parts: str) -> str:
        """The key of ``parts`` in the namespace's home; ValueError asked of a shard (for this package only)."""
        if self.tag:
            raise ValueError(f"{parts[0]!r} is a key of the namespace's home, not of shard {self.tag!r}")
        return self.name_key(*parts)

    # --- the layout (contract §9) -------------------------------------------------
    def for_torrent(self, info_hash: str) -> Self:
        """The keys of the shard holding ``info_hash``'s queue state (``shard_of``)."""
        return self.shard(shard_of(info_hash, self.shards))

    def by_shard(self, hashes: Iterable[str], most: int | None = None) -> list[tuple[Self, list[int]]]:
        """The positions of ``hashes`` by the shard holding each (``for_torrent``), in the order
        given, in runs of at most ``most`` (None: one run a shard): a script call's worth each."""
        groups: dict[Self, list[int]] = {}
        for i, h in enumerate(hashes):
            groups.setdefault(self.for_torrent(h), []).append(i)
        if most is None:
            return list(groups.items())
        return [(k, idx[at : at + most]) for k, idx in groups.items() for at in range(0, len(idx), most)]

    @property
    def layout(self) -> str:
        """STRING JSON ``{"shards": n, "counters": m}``: the crawl's layout, written by the first
        process that opens a namespace (``crawler/store/layout.py``); ``reshard`` changes ``shards`` and
        says ``"moving_to"`` while it runs."""
        return self.name_home_key("layout")
