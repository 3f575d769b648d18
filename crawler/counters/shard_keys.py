"""A counter shard's keys, as bytes, for the recorder's script calls.

A recording names the same keys call after call: the shard's outbox and its
torrents and countries indexes are made once a month, a country's six kept
in a bounded memory; a new torrent's two indexes are its info-hash after a
prefix made once a month, not kept. ``bucket_keys`` makes a call's mark
bucket keys in the order it numbered them.
"""

from __future__ import annotations

from crawler.counters.names import LIFETIME


def bucket_keys(bnumbers: dict, shard: ShardKeys) -> list[bytes]:
    """The keys of a call's mark buckets of ``shard`` in the order it numbers them (1, 2, ...).

    A call numbers each bucket it meets ``bnumbers.setdefault(n, len(bnumbers) + 1)``:
    one dict operation an IP and no call, and a dict keeps that order; the keys
    are made once the call is whole, each formatted anew (~0.1 µs a key): a dict
    keeping every bucket's key (~30 MB) is read at 4x that, its lookups missing
    the CPU's caches, after ~1.5 µs a key to fill it.
    """
    return list(map(shard.bucket_form.__mod__, bnumbers))


class ShardKeys:
    """One counter shard's keys as the recorder passes them (module note).

    ``keys``: the shard's ``Keys``.
    """

    __slots__ = ("_countries", "_shared", "_torrent_prefixes", "bucket_form", "keys", "outbox", "place_fixed",
                 "torrents")

    def __init__(self, keys):
        self.keys = keys
        self.outbox = keys.outbox.encode()
        self.torrents = keys.index(LIFETIME, ("torrents",)).encode()
        self.place_fixed = [self.outbox, keys.rollup_outbox.encode()]
        # ``bucket_form % n``: mark bucket n's key
        self.bucket_form = keys.mark_bucket_prefix.encode().replace(b"%", b"%%") + b"%d"
        self._shared: tuple[str, list[bytes]] = ("", [])  # a month and ``shared``'s keys
        self._countries: dict = {}
        self._torrent_prefixes: tuple[str, list[bytes]] = ("", [])  # a month and ``torrent_keys``'s prefixes

    def bucket(self, n: int) -> bytes:
        """The key of mark bucket ``n``."""
        return self.bucket_form % n

    def index(self, period: str, scope: tuple) -> bytes:
        """The key of one counter index (bytes: redis-py sends them as is)."""
        return self.keys.index(period, scope).encode()

    def shared(self, month: str) -> list:
        """The outbox and the four index keys every record.lua call gets (torrents, countries), made once a
        month (the caller copies them)."""
        got, keys = self._shared
        if got != month:
            keys = [self.outbox, *(self.index(period, scope) for scope in (("torrents",), ("countries",))
                                   for period in (LIFETIME, month))]
            self._shared = (month, keys)
        return keys

    def torrent_keys(self, h: str, month: str) -> list:
        """The two index keys of torrent ``h`` (lifetime, month: ``torrent_index``) that record.lua gets
        with each of its visits: the info-hash after each prefix (``Keys.torrent_index_prefix``), not
        kept (a torrent's are seldom asked for again before many others' have taken their place)."""
        got, prefixes = self._torrent_prefixes
        if got != month:
            prefixes = [self.keys.torrent_index_prefix(period).encode() for period in (LIFETIME, month)]
            self._torrent_prefixes = (month, prefixes)
        b = h.encode()
        return [p + b for p in prefixes]

    def country_keys(self, country: str, month: str) -> list:
        """The six per-country index keys record.lua gets for ``country`` (see its header)."""
        k = (country, month)
        got = self._countries.get(k)
        if got is None:
            if len(self._countries) > 10_000:  # bounded: ~250 countries a month
                self._countries.clear()
            got = self._countries[k] = [
                self.index(period, (family, "c", country))
                for family in ("torrents", "cities", "postcodes") for period in (LIFETIME, month)]
        return got
