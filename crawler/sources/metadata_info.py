"""A torrent's info dictionary, checked against its info-hash and summed up (BEP 3, BEP 9), sans-IO.

``read_info(info_hash, info)`` is the one door through which metadata a
peer sent becomes something the crawler keeps: bytes in, a frozen
``TorrentInfo`` (name, total size, file count) out, or ``InfoError``.

- The SHA-1 of the bytes must equal the v1 info-hash before anything in
  them is read. libtorrent checks the same before it posts
  ``metadata_received_alert``; this check does not rely on that.
- The bytes are read once by the project's bounded bencode reader with a
  schema that keeps only ``name``, ``name.utf-8``, ``length`` and each
  file's ``length`` and ``attr`` (its ``path`` is checked, never kept), so
  what a read holds is at most ``MAX_FILES`` small dictionaries whatever
  the input, and its time is bounded by ``MAX_VALUES``.
- The name is what ``add`` would keep from a ``.torrent`` with this info
  dictionary (``crawler.queue.torrent_names.of_torrent``: ``name.utf-8``
  when it is UTF-8, cleaned and cut to 200 characters); None when neither
  holds a usable name.
- Padding files (BEP 47: an ``attr`` holding ``p``), which hybrid v1/v2
  torrents put between files so that each starts on a piece boundary, are
  not files anyone shares: they count in neither the size nor the count.
- A multi-file dictionary (``files``) wins over ``length`` where both are
  present, as libtorrent reads it. One with neither is refused.

Bounds, chosen so that no real torrent meets them:

- ``MAX_METADATA_BYTES`` (4 MiB): libtorrent is told to refuse larger
  metadata (``max_metadata_size``), and a longer input is refused here too.
  An info dictionary is mostly its piece hashes (20 bytes a piece: a 50 GB
  torrent of 4 MiB pieces has 250 KB of them); 4 MiB also holds ~90,000
  files of 40-byte paths.
- ``MAX_VALUES`` (1,000,000 bencode values): a real file entry costs about
  seven, so 4 MiB of real entries stays far below it. Read at about 5 us a
  file entry, the worst input costs ~0.5 s of one core, once per fetch
  whose bytes hashed to the info-hash (so whoever wrote them made that
  torrent).
- ``MAX_FILES`` (100,000): files past it are counted but their lengths are
  only checked, and the total size is then unknown (None).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from crawler.bencode import codec as bencode
from crawler.errors import RemoteProtocolError
from crawler.queue.torrent_names import of_torrent

MAX_METADATA_BYTES = 4 * 1024 * 1024
MAX_VALUES = 1_000_000
MAX_FILES = 100_000

_FILE = bencode.Keys({b"length": bencode.LEAF, b"attr": bencode.LEAF})
_INFO = bencode.Keys({
    b"name": bencode.LEAF,
    b"name.utf-8": bencode.LEAF,
    b"length": bencode.LEAF,
    b"files": bencode.Items(_FILE, limit=MAX_FILES),
})


class InfoError(RemoteProtocolError):
    """Metadata a peer sent is not this torrent's, or not a usable info dictionary; the message says why."""


class InfoMismatch(InfoError):
    """The metadata does not hash to the info-hash it was asked for."""


@dataclass(frozen=True)
class TorrentInfo:
    """What the crawler keeps of a torrent's info dictionary.

    ``name``: cleaned as ``add`` cleans names (None: no usable name).
    ``total_size``: bytes of its files, padding left out (None: more than
    ``MAX_FILES`` files, whose sizes were not added up). ``file_count``:
    its files, padding left out.
    """

    name: str | None
    total_size: int | None
    file_count: int


def read_info(info_hash: bytes, info: bytes) -> TorrentInfo:
    """The ``TorrentInfo`` of ``info``, the bencoded info dictionary of the torrent ``info_hash`` (20 bytes).

    Raises ``InfoMismatch`` if the SHA-1 of ``info`` is not ``info_hash``,
    ``InfoError`` for anything else wrong (too long, not bencode, over the
    budget, no files, a length that is not a whole number of 0 or more).
    ``ValueError`` if ``info_hash`` is not 20 bytes (our fault).
    """
    if len(info_hash) != 20:
        raise ValueError(f"a v1 info-hash is 20 bytes, got {len(info_hash)}")
    if len(info) > MAX_METADATA_BYTES:
        raise InfoError(f"info dictionary of {len(info):,} bytes, more than {MAX_METADATA_BYTES:,}")
    digest = hashlib.sha1(info).digest()
    if digest != info_hash:
        raise InfoMismatch(f"metadata hashes to {digest.hex()}, not to the info-hash {info_hash.hex()}")
    try:
        d = bencode.decode(info, _INFO, max_values=MAX_VALUES)
    except bencode.BencodeError as e:
        raise InfoError(f"info dictionary is not valid bencode: {e}") from None
    if not isinstance(d, dict):
        raise InfoError("info dictionary is not a dictionary")
    name = of_torrent(d.get(b"name"), d.get(b"name.utf-8"))
    files = d.get(b"files")
    if files is not None:
        if not isinstance(files, bencode.Cut):
            raise InfoError("info dictionary's files is not a list")
        size, count = _files(files)
        return TorrentInfo(name, None if files.cut else size, count + files.cut)
    if b"length" in d:
        return TorrentInfo(name, _length(d[b"length"], "length"), 1)
    raise InfoError("info dictionary has neither length nor files (a v2-only torrent?)")


def _files(files: bencode.Cut) -> tuple[int, int]:
    """(total size, count) of the file entries kept, padding files left out."""
    size = count = 0
    for i, entry in enumerate(files):
        if not isinstance(entry, dict):
            raise InfoError(f"file {i} of the info dictionary is not a dictionary")
        length = _length(entry.get(b"length"), f"file {i}'s length")
        attr = entry.get(b"attr")
        if isinstance(attr, bytes) and b"p" in attr:
            continue
        size += length
        count += 1
    return size, count


def _length(value: object, what: str) -> int:
    """``value`` as a length: a whole number of 0 or more."""
    if type(value) is not int or value < 0:
        raise InfoError(f"{what} is not a whole number of 0 or more")
    return value
