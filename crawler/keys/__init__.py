"""Every Redis key name peercrawl uses, in one room (docs/redis.md): ``Keys``, grouped by the room that owns them.

A namespace's keys live in shards (crawler/shard_layout.py): the home holds
what the whole crawl shares (workers, trackers' health, the layout), a
torrent's queue keys live in the shard of its info-hash (``Keys.for_torrent``),
an IP's marks and counter parts in the shard of its fingerprint. Every Lua
script touches one shard's keys, all through KEYS, so each runs in one slot.
Info-hashes appear as 40 lower-case hex characters.

Each key is one named property or method whose docstring gives its type and
content, in the module of the room that owns it (``queue_keys``, ``source_keys``,
``counter_keys``, ``stathat_keys``; ``namespace`` builds them all, ``placement`` says
in which shard a key lives); docs/redis.md describes them all. No module
outside this package builds a key name (tests/test_keys.py greps crawler/,
workers/ and geo/ for it): a new key gets a method here.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.keys import counter_keys, namespace, queue_keys, source_keys, stathat_keys
from crawler.keys.counter_keys import CounterKeys
from crawler.keys.placement import index_tail, shard_of, shard_of_fingerprint, total_shard
from crawler.keys.queue_keys import QueueKeys
from crawler.keys.source_keys import BUDGETS, SourceKeys
from crawler.keys.stathat_keys import StatHatKeys

# The first part (after the namespace) of every key peercrawl names.
RESERVED = (namespace.RESERVED | queue_keys.RESERVED | source_keys.RESERVED | counter_keys.RESERVED
            | stathat_keys.RESERVED)

__all__ = ["BUDGETS", "RESERVED", "Keys", "index_tail", "shard_of", "shard_of_fingerprint", "total_shard"]


@dataclass(frozen=True)
class Keys(QueueKeys, SourceKeys, CounterKeys, StatHatKeys):
    """The key names of one namespace (``PEERCRAWL_NAMESPACE``) and its layout.

    ``Keys(namespace, shards)`` is the home; ``shard(i)`` (and
    ``for_torrent``, ``all_shards``) the keys of one shard, whose ``tag`` is
    not empty unless the crawl has a single shard. A home-only key asked of
    a shard raises ``ValueError``: it would name a key nobody reads.
    """

    # --- not peercrawl's ---------------------------------------------------
    @property
    def match_all(self) -> str:
        """SCAN MATCH pattern of every key of the namespace, home and shards (``{<namespace>[}/]*``)."""
        return "{" + self.namespace + "[}/]*"

    def scratch(self, *parts: str) -> str:
        """Any type: a key a benchmark or test keeps under the namespace (dropped with it); peercrawl never
        reads or writes one (a test forbids it in crawler/, workers/ and geo/); a first part that names one
        of peercrawl's own keys is refused."""
        if not parts or parts[0] in RESERVED:
            raise ValueError(f"scratch key {parts!r} would collide with one of peercrawl's keys")
        return self.name_key(*parts)
