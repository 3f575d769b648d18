"""The queue's keys (contract §1). Each state's set, a torrent's hashes, the per-minute counts and
the workers' registry; a torrent's live in its shard (``Keys.for_torrent``), the registry in the home."""

from __future__ import annotations

from crawler.keys.namespace import NamespaceKeys

# The first part (after the namespace) of every key below.
RESERVED = frozenset({'atrisk', 'claims', 'cooling', 'evicted', 'expiries', 'failedvisits', 'held', 'lane', 'lanecredit', 'leases', 'quarantine', 'quarantined', 'rates', 'ready', 'since', 't', 'tombstones', 'tr', 'vh', 'visits', 'w', 'workers'})


class QueueKeys(NamespaceKeys):
    """The queue's keys (contract §1): each state's set, a torrent's hashes, the per-minute counts and"""

    # --- the queue (contract §1) ---------------------------------------------
    @property
    def ready(self) -> str:
        """ZSET info-hash -> score: ready torrents, highest first."""
        return self.name_key("ready")

    def ready_in(self, lane: str) -> str:
        """ZSET info-hash -> score: the ready torrents of ``lane`` (crawler/queue/lanes.py); the normal
        lane's is ``ready``."""
        return self.ready if lane == "normal" else self.name_key("ready", lane)

    def lane_members(self, lane: str) -> str:
        """ZSET info-hash -> its due time while it cools, else 0 (claim.lua's due index of the lane):
        the torrents of ``lane`` (high, low or discovered; a torrent in none is in the normal lane)."""
        if lane == "normal":
            raise ValueError("the normal lane has no member set: it is every torrent of no other lane")
        return self.name_key("lane", lane)

    @property
    def lane_credit(self) -> str:
        """HASH lane -> the claims owed to it from its guaranteed share (claim.lua)."""
        return self.name_key("lanecredit")

    @property
    def since(self) -> str:
        """ZSET info-hash -> unix time it became ready (queue latency)."""
        return self.name_key("since")

    @property
    def cooling(self) -> str:
        """ZSET info-hash -> unix time it becomes ready again."""
        return self.name_key("cooling")

    @property
    def leases(self) -> str:
        """ZSET info-hash -> unix time its lease expires (in flight)."""
        return self.name_key("leases")

    @property
    def evicted(self) -> str:
        """ZSET info-hash -> unix time of eviction (tombstones)."""
        return self.name_key("evicted")

    @property
    def tombstones(self) -> str:
        """HASH info-hash -> JSON {reason, at, score} of evicted torrents."""
        return self.name_key("tombstones")

    @property
    def held(self) -> str:
        """HASH info-hash -> score of torrents cooling, in flight or quarantined (no field: 1.0)."""
        return self.name_key("held")

    @property
    def claims(self) -> str:
        """HASH info-hash -> times claimed; the latest is the lease token."""
        return self.name_key("claims")

    @property
    def expiries(self) -> str:
        """HASH info-hash -> leases expired in a row without a completion."""
        return self.name_key("expiries")

    @property
    def quarantined(self) -> str:
        """ZSET info-hash -> unix time it was quarantined (poison torrents)."""
        return self.name_key("quarantined")

    @property
    def quarantine(self) -> str:
        """HASH info-hash -> JSON {reason, at, expiries, score} of quarantined torrents."""
        return self.name_key("quarantine")

    def torrent(self, info_hash: str) -> str:
        """HASH of one torrent: score, claims, visits, seeders, tombstone..."""
        return self.name_key("t", info_hash)

    def trackers(self, info_hash: str) -> str:
        """SET of the torrent's own tracker URLs (magnet tr=, announce-list)."""
        return self.name_key("tr", info_hash)

    def history(self, info_hash: str) -> str:
        """STRING of the torrent's last visits, 20 bytes each (``complete.lua``, ``torrent_record.unpack_history``)."""
        return self.name_key("vh", info_hash)

    @property
    def visits(self) -> str:
        """HASH unix minute -> visits completed in that minute."""
        return self.name_key("visits")

    @property
    def failed_visits(self) -> str:
        """HASH unix minute -> failed visits (no source answered)."""
        return self.name_key("failedvisits")

    # --- workers ---------------------------------------------------------
    @property
    def atrisk(self) -> str:
        """ZSET info-hash -> unix time from which its next visit without peers evicts it: the torrents
        one such visit would bring below the eviction threshold (complete.lua; pinned ones are not)."""
        return self.name_key("atrisk")

    @property
    def rates(self) -> str:
        """HASH of the queue's per-minute operator counts (crawler/queue/rates.py): ``a:<minute>``
        torrents asked for, ``s:<minute>`` handed out, ``r:<minute>`` leases reclaimed,
        ``rt:<minute>:<bucket>`` visit round trips."""
        return self.name_key("rates")

    @property
    def workers(self) -> str:
        """ZSET worker id -> heartbeat expiry time."""
        return self.name_home_key("workers")

    def worker(self, worker_id: str) -> str:
        """HASH of one worker process (host, pid, concurrency, visits...)."""
        return self.name_home_key("w", worker_id)
