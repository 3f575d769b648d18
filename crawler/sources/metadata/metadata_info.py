"""A torrent's info dictionary, checked against its info-hash and summed up (BEP 3, BEP 9), sans-IO.

``read_info(info_hash, info, pause)`` is the one door through which
metadata a peer sent becomes something the crawler keeps: bytes in, a
frozen ``TorrentInfo`` (name, total size, file count) out, or ``InfoError``.

- The SHA-1 of the bytes must equal the v1 info-hash before anything in
  them is read. libtorrent checks the same before it posts
  ``metadata_received_alert``; this check does not rely on that.
- The bytes are read once, keeping only ``name``, ``name.utf-8``,
  ``length`` and each file's ``length`` and ``attr`` (its ``path`` is
  checked, never kept), so what a read holds is at most a few values
  whatever the input, and its time is bounded by ``MAX_VALUES``.
- In slices: ``pause`` (if given) is called after every ``SLICE_BYTES``
  bytes hashed and every ``SLICE_VALUES`` values read, so a caller on an
  event loop lets it run between slices (the fetcher passes
  ``gevent.sleep``): the worst input takes about a second of one core,
  but no slice holds the loop more than a few milliseconds. The reader is
  a loop over the bytes with a stack of the open containers (so it can
  stop anywhere and go on), and each string, integer and dictionary key
  is read by the project's bounded bencode reader
  (``crawler.bencode.reader.Reader``): the same strictness and the same
  budget as ``bencode.decode`` with a schema keeping those keys, and the
  same outcome for every input.
- The name is what ``add`` would keep from a ``.torrent`` with this info
  dictionary (``crawler.torrents.torrent_names.of_torrent``: ``name.utf-8``
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
  seven, so 4 MiB of real entries stays far below it. At about 1 us a
  value, the worst input costs ~1 s of one core, in slices, once per fetch
  whose bytes hashed to the info-hash (so whoever wrote them made that
  torrent).
- ``MAX_FILES`` (100,000): files past it are counted but their lengths are
  only checked, and the total size is then unknown (None).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator
from dataclasses import dataclass

from crawler.bencode import codec as bencode
from crawler.bencode.reader import Reader
from crawler.errors import RemoteProtocolError
from crawler.torrents.torrent_names import of_torrent

MAX_METADATA_BYTES = 4 * 1024 * 1024
MAX_VALUES = 1_000_000
MAX_FILES = 100_000
# Between two pauses: about 1-3 ms of one core each.
SLICE_VALUES = 2_000
SLICE_BYTES = 512 * 1024

_I, _L, _D, _E = 0x69, 0x6C, 0x64, 0x65
# The containers open on the stack: the info dictionary, its files list, a
# file entry, and any other dictionary or list (checked, nothing kept).
_ROOT, _FILES, _ENTRY, _DICT, _LIST = range(5)
# What a value is to its container: the whole input, a string or integer kept (a container there is
# noted and skipped), the files, a file entry, a value only checked.
_TOP, _KEEP, _FILES_VALUE, _FILE, _SKIP = range(5)
_ROOT_FIELDS = {b"name": _KEEP, b"name.utf-8": _KEEP, b"length": _KEEP, b"files": _FILES_VALUE}
_ENTRY_FIELDS = {b"length": _KEEP, b"attr": _KEEP}
_A_LIST = object()  # the files value was a list (its entries are summed up as they are read)


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


def read_info(info_hash: bytes, info: bytes, pause: Callable[[], object] | None = None) -> TorrentInfo:
    """The ``TorrentInfo`` of ``info``, the bencoded info dictionary of the torrent ``info_hash`` (20 bytes).

    ``pause``: called between slices of the work (see the module's note).
    Raises ``InfoMismatch`` if the SHA-1 of ``info`` is not ``info_hash``,
    ``InfoError`` for anything else wrong (too long, not bencode, over the
    budget, no files, a length that is not a whole number of 0 or more).
    ``ValueError`` if ``info_hash`` is not 20 bytes (our fault).
    """
    steps = _reading(info_hash, bytes(info))
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        if pause is not None:
            pause()


def _reading(info_hash: bytes, info: bytes) -> Generator[None, None, TorrentInfo]:
    """``read_info``'s work, yielding between slices."""
    if len(info_hash) != 20:
        raise ValueError(f"a v1 info-hash is 20 bytes, got {len(info_hash)}")
    if len(info) > MAX_METADATA_BYTES:
        raise InfoError(f"info dictionary of {len(info):,} bytes, more than {MAX_METADATA_BYTES:,}")
    sha1, view = hashlib.sha1(), memoryview(info)
    for at in range(0, len(info), SLICE_BYTES):
        if at:
            yield
        sha1.update(view[at : at + SLICE_BYTES])
    digest = sha1.digest()
    if digest != info_hash:
        raise InfoMismatch(f"metadata hashes to {digest.hex()}, not to the info-hash {info_hash.hex()}")
    got = _Info()
    try:
        yield from _walk(info, got)
    except bencode.BencodeError as e:
        raise InfoError(f"info dictionary is not valid bencode: {e}") from None
    return got.summary()


class _Info:
    """What the walk kept of an info dictionary, summed up by ``summary``."""

    __slots__ = ("is_dict", "fields", "files", "size", "count", "cut", "error")

    def __init__(self):
        self.is_dict = False
        self.fields: dict = {}  # name, name.utf-8, length -> the value (a Skipped for a list or dictionary)
        self.files: object = None  # None: no files; _A_LIST; else the value that was not a list
        self.size = self.count = self.cut = 0  # the kept entries' bytes and files, padding left out; past MAX_FILES
        self.error: str | None = None  # the first kept entry that is not a file

    def entry(self, index: int, entry: object) -> None:
        """Sum up the file entry ``index`` (a dictionary of its kept keys, or what it was instead)."""
        if self.error is not None:
            return
        if not isinstance(entry, dict):
            self.error = f"file {index} of the info dictionary is not a dictionary"
            return
        length = entry.get(b"length")
        if type(length) is not int or length < 0:
            self.error = f"file {index}'s length is not a whole number of 0 or more"
            return
        attr = entry.get(b"attr")
        if not (isinstance(attr, bytes) and b"p" in attr):
            self.size += length
            self.count += 1

    def summary(self) -> TorrentInfo:
        if not self.is_dict:
            raise InfoError("info dictionary is not a dictionary")
        fields = self.fields
        name = of_torrent(fields.get(b"name"), fields.get(b"name.utf-8"))
        if self.files is not None:
            if self.files is not _A_LIST:
                raise InfoError("info dictionary's files is not a list")
            if self.error is not None:
                raise InfoError(self.error)
            return TorrentInfo(name, None if self.cut else self.size, self.count + self.cut)
        if b"length" in fields:
            length = fields[b"length"]
            if type(length) is not int or length < 0:
                raise InfoError("length is not a whole number of 0 or more")
            return TorrentInfo(name, length, 1)
        raise InfoError("info dictionary has neither length nor files (a v2-only torrent?)")


def _walk(data: bytes, got: _Info) -> Generator[None, None, None]:
    """Read ``data`` as one bencoded info dictionary into ``got``, yielding every ``SLICE_VALUES`` steps.

    Raises ``BencodeError`` where ``bencode.decode`` would with a schema
    keeping what ``got`` keeps (``Keys`` of ``LEAF`` values, ``files`` as
    ``Items`` of ``MAX_FILES`` entries), with the same message. ``stack``:
    the open containers; ``role``: what the value at ``i`` is to the
    innermost (None: in a list or dictionary, an item or a key comes next).
    """
    if not data:
        raise bencode.BencodeError("empty input")
    r = Reader(data, MAX_VALUES)
    size, keep, skip, max_files, slice_values = len(data), r.keep, r.skip, MAX_FILES, SLICE_VALUES
    stack: list[_Frame] = []
    top: _Frame | None = None  # stack[-1]
    role: int | None
    i, role, steps = 0, _TOP, slice_values
    while role is not None or stack:
        steps -= 1
        if steps < 0:
            steps = slice_values
            yield
        if role is not None:
            if i >= size:
                raise bencode.BencodeError(f"truncated: value expected at offset {i}")
            c = data[i]
            if c == _L or c == _D:
                top = _open(r, i, len(stack), role, c == _D, top, got)
                stack.append(top)
                i += 1
            elif role == _SKIP:
                i = skip(i, len(stack))
            else:
                value, i = keep(i, len(stack))
                _kept(role, value, top, got)
            role = None
        else:
            assert top is not None  # with no value to read, the loop runs while a container is open
            if i >= size:
                raise bencode.BencodeError(
                    f"truncated: {'list' if top.listed else 'dictionary'} not closed at offset {i}")
            elif data[i] == _E:
                stack.pop()
                i += 1
                _closed(top, got)
                top = stack[-1] if stack else None
            elif top.listed:
                role = _FILE if top.kind == _FILES and top.count < max_files else _SKIP
                top.count += 1
            else:
                role, i = _key(r, i, top, len(stack))
    if i != size:
        raise bencode.BencodeError(f"{size - i} trailing bytes after the value at offset {i}")


class _Frame:
    """A container open in ``_walk``: its kind, whether it is a list, the keys kept (the info dictionary's
    and a file entry's), the key whose value comes next, the items seen (a list), its index (a file entry)."""

    __slots__ = ("kind", "listed", "kept", "field", "count", "index")

    def __init__(self, kind: int, kept: dict | None, index: int):
        self.kind, self.listed, self.kept, self.index = kind, kind == _FILES or kind == _LIST, kept, index
        self.field = b""
        self.count = 0


def _open(r: Reader, i: int, depth: int, role: int, is_dict: bool, parent: _Frame | None, got: _Info) -> _Frame:
    """The frame of the list or dictionary at ``i``, ``depth`` containers deep, a value of ``role`` in
    ``parent``: counted against the budget and the depth as ``Reader`` counts it, and noted in ``got``."""
    kind, kept, index = (_DICT if is_dict else _LIST), None, 0
    if role == _TOP:
        if is_dict:
            kind, kept, got.is_dict = _ROOT, got.fields, True
    elif role == _FILES_VALUE:
        got.files = bencode.DICTIONARY if is_dict else _A_LIST
        if not is_dict:
            kind = _FILES
    elif role == _FILE:
        assert parent is not None  # an item of the files list
        index = parent.count - 1
        if is_dict:
            kind, kept = _ENTRY, {}
        else:
            got.entry(index, bencode.LIST)
    elif role == _KEEP:
        assert parent is not None and parent.kept is not None  # a field of the dictionary that keeps it
        parent.kept[parent.field] = bencode.DICTIONARY if is_dict else bencode.LIST
    r.left -= 1
    if r.left < 0:
        raise bencode.TooManyValues(r.limit, i)
    if depth > bencode.MAX_DEPTH:
        raise _too_deep(i)
    return _Frame(kind, kept, index)


def _key(r: Reader, i: int, top: _Frame, depth: int) -> tuple[int, int]:
    """(the role of its value, the offset after it) of the key at ``i`` of the dictionary ``top``."""
    c = r.data[i]
    if top.kind == _DICT:
        if not 0x30 <= c <= 0x39:
            # counted first, as the reader's skip counts every value before it checks its place
            if r.left < 1:
                raise bencode.TooManyValues(r.limit, i)
            raise bencode.BencodeError(f"dictionary key at offset {i} is not a byte string")
        return _SKIP, r.skip(i, depth)
    key, i = r.key(i, c)
    assert top.kept is not None  # the info dictionary or a file entry: both keep fields
    role = (_ROOT_FIELDS if top.kind == _ROOT else _ENTRY_FIELDS).get(key, _SKIP)
    if role != _SKIP:
        if key in top.kept:
            raise bencode.BencodeError(f"duplicate dictionary key {key[:40]!r} before offset {i}")
        top.kept[key] = None
        top.field = key
    return role, i


def _kept(role: int, value: object, parent: _Frame | None, got: _Info) -> None:
    """A string or integer ``value`` of ``role`` in ``parent`` (None: the whole input), noted in ``got``."""
    if role == _KEEP:
        assert parent is not None and parent.kept is not None  # a field of the dictionary that keeps it
        parent.kept[parent.field] = value
    elif role == _FILES_VALUE:
        got.files = value
    elif role == _FILE:
        assert parent is not None  # an item of the files list
        got.entry(parent.count - 1, value)


def _closed(frame: _Frame, got: _Info) -> None:
    """``frame``'s container has ended: a file entry is summed up, the files past ``MAX_FILES`` counted."""
    if frame.kind == _ENTRY:
        got.entry(frame.index, frame.kept)
    elif frame.kind == _FILES:
        got.cut = max(0, frame.count - MAX_FILES)


def _too_deep(i: int) -> bencode.BencodeError:
    return bencode.BencodeError(f"nesting deeper than {bencode.MAX_DEPTH} at offset {i}")
