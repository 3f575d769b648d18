"""Torrent names: a magnet's ``dn=`` or a ``.torrent``'s ``info.name``, cleaned once at intake, read back per page.

A name is whatever the torrent's author or the magnet's writer chose, so
it is cleaned before it is stored (``clean``), and every reader shows the
stored text as third-party text (``crawler.safe_text``; the dashboard as
text, never markup):

- bytes that are not UTF-8 become U+FFFD (as do the surrogate escapes that
  stand for such bytes in a command line or a ``--from`` line);
- whitespace of any kind becomes one space between words, none at either end;
- every other character of the Unicode categories C* goes: controls
  (terminal escapes), format characters (bidirectional overrides such as
  U+202E, zero-width spaces and joiners, byte-order marks), private-use and
  unassigned code points;
- the result is cut to ``MAX_CHARS`` characters (code points, never inside
  one; a combining mark is not parted from its base), so it holds at most
  ``MAX_BYTES`` bytes of UTF-8, which ``add.lua`` checks again;
- a name that is empty after all this is no name.

Only the first ``READ_CHARS`` characters (``READ_BYTES`` bytes) of what an
item gives are looked at, so a hostile 64 MiB name costs what a short one
does. ``clean`` is idempotent: a clean name is returned as it is, at the cost
of one ``isprintable``.

The name is the ``name`` field of the torrent's HASH (``Keys.torrent(h)``),
written by ``add.lua`` in the admission's own step when the torrent has none:
it lives and expires with the torrent's other fields, moves with them
(``reshard``), and a later add fills a missing name but never replaces one.
``read`` is the readers' one round trip for a page of rows.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Sequence

import redis

from crawler.errors import StoreError
from crawler.keys import Keys

# Longer than nearly every real torrent name (release names run to ~120), short enough for a table cell.
MAX_CHARS = 200
# UTF-8 takes at most 4 bytes a character: the most a stored name holds (add.lua's bound).
MAX_BYTES = 4 * MAX_CHARS
# How much of a given name is read: room for the junk cleaning removes, bounded whatever the input.
READ_CHARS = 4096
READ_BYTES = 4 * READ_CHARS
# The field of the torrent HASH that holds the name (add.lua writes it, ``read`` reads it).
FIELD = "name"

_SURROGATES = re.compile("[\ud800-\udfff]")


def clean(raw: str | bytes | None) -> str | None:
    """``raw`` as a name to store and show (the module's rules), or None when nothing is left.

    Bytes are read as UTF-8, anything else replaced; text is taken as it is
    (lone surrogates, which stand for bytes that were not UTF-8, replaced).
    """
    if raw is None:
        return None
    text = raw if isinstance(raw, str) else bytes(raw[:READ_BYTES]).decode("utf-8", "replace")
    if text and len(text) <= MAX_CHARS and text.isprintable() and text.strip(" ") == text and "  " not in text:
        return text  # clean already: no C*, no whitespace but single inner spaces
    text = _SURROGATES.sub("\ufffd", text[:READ_CHARS])
    kept = "".join(" " if ch.isspace() else ch for ch in text
                   if ch.isspace() or unicodedata.category(ch)[0] != "C")
    return _cut(" ".join(kept.split()), MAX_CHARS).rstrip() or None


def _cut(text: str, n: int) -> str:
    """``text`` cut to at most ``n`` code points, the cut moved back before a base whose marks it would part."""
    if len(text) <= n:
        return text
    while n > 0 and unicodedata.category(text[n])[0] == "M":
        n -= 1
    return text[:n]


def _utf8(raw: bytes) -> str | None:
    """The first ``READ_BYTES`` bytes of ``raw`` as text when they are UTF-8 (a character cut at the end
    of them left out), else None."""
    try:
        return codecs.getincrementaldecoder("utf-8")("strict").decode(raw[:READ_BYTES], final=False)
    except UnicodeDecodeError:
        return None


def of_torrent(name: object, name_utf8: object) -> str | None:
    """The name of a ``.torrent`` from its ``info`` dictionary's ``name`` and ``name.utf-8`` values.

    ``name.utf-8`` (which some clients write beside a ``name`` in a local
    code page) when it is a string of UTF-8 with something left after
    cleaning; else ``name``; else ``name.utf-8`` with its bad bytes
    replaced. A value that is not a string (a list, a number) is no name.
    """
    if isinstance(name_utf8, bytes) and (text := _utf8(name_utf8)) is not None and (got := clean(text)):
        return got
    if isinstance(name, bytes) and (got := clean(name)):
        return got
    return clean(name_utf8) if isinstance(name_utf8, bytes) else None


def read(client: redis.Redis, keys: Keys, hashes: Sequence[str]) -> list[str | None]:
    """The stored name of each of ``hashes`` (None: none), in one pipelined round trip.

    ``keys``: the namespace's keys with the crawl's shard count; each
    torrent's HASH is read in its own shard (and slot: a cluster pipeline
    sends each node its part). Raises ``StoreError``.
    """
    if not hashes:
        return []
    p = client.pipeline(transaction=False)
    for h in hashes:
        p.hget(keys.for_torrent(h).torrent(h), FIELD)
    try:
        got = p.execute()
    except redis.RedisError as e:
        raise StoreError(f"reading torrent names failed: {e}") from e
    return [None if v is None else v.decode("utf-8", "replace") for v in got]
