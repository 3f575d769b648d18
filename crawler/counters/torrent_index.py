"""One torrent's index: its three families in one hash a period.

Strategy. record.lua counts a torrent's places into one hash a period, the
key of its countries (``ix:<period>:countries:t:<h>``): a country's member
as it is, a city's and a postcode's (``<country>.<name>``) behind its
family's prefix (``names.TORRENT_FIELD``). A new torrent's first visit then
makes two keys, not six, and a key costs Redis more than its few members
(record.lua's header). A crawl recorded before kept a torrent's cities and
postcodes in hashes of their own (``ix:<period>:cities:t:<h>``, the
*older* keys), which nothing writes any more: every read here adds what
they hold, so no count is lost across the upgrade and none is moved.

Reads take a scope of ``names`` (``(family, "t", h)``) and give members
without their prefix, as the scope's own index would hold them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import redis

from crawler.counters.names import TORRENT_FIELD
from crawler.counters.rollup import member_key
from crawler.keys import Keys

# The families kept behind a prefix, and the prefixes: a field starting with none is a country's.
_TAGGED = [(family, tag.encode()) for family, tag in TORRENT_FIELD.items() if tag]
_TAGS = tuple(tag for _, tag in _TAGGED)


def hash_key(keys: Keys, period: str, h: str) -> str:
    """The key of torrent ``h``'s hash for ``period`` (in its counter shard)."""
    return member_key(keys, period, ("countries", "t", h), "")


def older_key(keys: Keys, period: str, scope: tuple[str, ...]) -> str | None:
    """The key an earlier crawl kept ``scope``'s members in (a city's or postcode's), else None."""
    return None if scope[0] == "countries" else member_key(keys, period, scope, "")


def _glob_literal(text: str) -> str:
    """``text`` as a SCAN MATCH pattern matching itself only."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _fields(client: redis.Redis, key: str, prefix: str) -> Iterable[tuple[bytes, bytes]]:
    """The fields of hash ``key`` starting with ``prefix`` and their values (all of them for "")."""
    if not prefix:
        return cast(dict[bytes, bytes], client.hgetall(key)).items()  # the client decodes no replies
    return client.hscan_iter(key, match=_glob_literal(prefix) + "*", count=1000)


def members(client: redis.Redis, keys: Keys, period: str, scope: tuple[str, ...],
            prefix: str = "") -> dict[str, int]:
    """Member -> count of the index ``scope`` (``(family, "t", h)``) of ``period``, the members
    starting with ``prefix`` only (one country's cities: ``"<country>."``)."""
    family, h = scope[0], scope[2]
    tag = TORRENT_FIELD[family]
    out: dict[str, int] = {}
    for m, n in _fields(client, hash_key(keys, period, h), tag + prefix):
        if not tag and m.startswith(_TAGS):
            continue  # a city's or postcode's
        member = m[len(tag):].decode()
        out[member] = out.get(member, 0) + int(n)
    older = older_key(keys, period, scope)
    if older is not None:
        for m, n in _fields(client, older, prefix):
            member = m.decode()
            out[member] = out.get(member, 0) + int(n)
    return out


def count(client: redis.Redis, keys: Keys, period: str, scope: tuple[str, ...], member: str) -> int | None:
    """The count of ``member`` in the index ``scope`` of ``period``; None where neither key holds it."""
    p = client.pipeline(transaction=False)
    p.hget(hash_key(keys, period, scope[2]), TORRENT_FIELD[scope[0]] + member)
    older = older_key(keys, period, scope)
    if older is not None:
        p.hget(older, member)
    got = [int(n) for n in p.execute() if n is not None]
    return sum(got) if got else None


def read_all(pipe: redis.client.Pipeline, keys: Keys, period: str, h: str) -> None:
    """Queue the reads ``split`` takes apart: torrent ``h``'s hash and its older keys (three replies)."""
    pipe.hgetall(hash_key(keys, period, h))
    for family, _ in _TAGGED:
        pipe.hgetall(member_key(keys, period, (family, "t", h), ""))


def split(replies: list) -> dict[str, dict[bytes, int]]:
    """``read_all``'s three replies as family -> member -> count (members as stored, without prefix)."""
    whole, *older = replies
    out: dict[str, dict[bytes, int]] = {family: {} for family in TORRENT_FIELD}
    for m, n in whole.items():
        family, member = "countries", m
        for f, tag in _TAGGED:
            if m.startswith(tag):
                family, member = f, m[len(tag):]
                break
        out[family][member] = out[family].get(member, 0) + int(n)
    for (family, _), got in zip(_TAGGED, older):
        for m, n in got.items():
            out[family][m] = out[family].get(m, 0) + int(n)
    return out
