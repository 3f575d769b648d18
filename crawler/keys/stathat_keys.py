"""The StatHat outbox's keys (contract §6). Counts waiting to be posted, the batch in flight and
its owner, and the torrents counted in ``torrents.processed`` per hour."""

from __future__ import annotations

from crawler.keys.namespace import NamespaceKeys

# The first part (after the namespace) of every key below.
RESERVED = frozenset({'sh'})


class StatHatKeys(NamespaceKeys):
    """The StatHat outbox's keys (contract §6): counts waiting to be posted, the batch in flight and"""

    @property
    def outbox(self) -> str:
        """HASH StatHat stat name -> pending count (``sh:outbox``), written with the counters."""
        return self.name_key("sh", "outbox")

    @property
    def outbox_in_flight(self) -> str:
        """HASH StatHat stat name -> count of the batch a flusher is posting (``sh:inflight``)."""
        return self.name_key("sh", "inflight")

    @property
    def outbox_owner(self) -> str:
        """STRING ``"<token> <lease end, Redis ms>"``: the flusher holding the claim on
        ``outbox_in_flight`` (``sh:owner``; no TTL, renewed by each ack)."""
        return self.name_key("sh", "owner")

    def processed(self, hour: int) -> str:
        """HASH info-hash -> 1: torrents counted in ``torrents.processed`` in unix hour
        ``hour`` (``sh:processed:<hour>``; visited.lua: expires two hours after its last new member)."""
        return self.name_key("sh", "processed", str(int(hour)))
