"""Hostile sizes cost bounded memory and time: .torrent files and tracker replies are decoded in one
bounded pass (a budget of values, and only what is read kept).

Memory is measured two ways: the peak of Python's allocations (tracemalloc) in this process for tracker
replies, and the growth of the peak resident size of a ``peercrawl add`` process for 8 MiB .torrent
files (tracemalloc slows a loop over millions of bytes some tenfold). Time is CPU time of the thread
(``time.thread_time``), so other processes on a loaded machine do not count; the bounds are several
times what a decode takes here and far under what decoding everything took (an 8 MiB file: 10 s and
618 MB; a 2 MiB reply: 0.5-1 s and 75-93 MB).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import tracemalloc

import pytest

from crawler.bencode import codec as bencode
from crawler.errors import ItemError
from crawler.sources.trackers import http_codec as h
from crawler.torrents import items
from crawler.torrents.items import parse_torrent

MIB = 1024 * 1024
H = f"{0xB0DE5:040x}"


def _nested_torrent(size: int, where: str) -> bytes:
    """A .torrent of about ``size`` bytes, mostly lists nested 60 deep, empty at the bottom, at ``where``:
    inside the info dictionary, under a key nobody reads, or as the announce-list."""
    block = b"l" * 60 + b"e" * 60
    info_end = b"6:pieces20:" + b"\0" * 20 + b"e"
    fixed = 64
    lists = b"l" + block * ((size - fixed) // len(block)) + b"e"
    if where == "info":
        return b"d4:infod5:files" + lists + info_end + b"e"
    if where == "unread key":
        return b"d4:infod" + info_end + b"1:x" + lists + b"e"
    return b"d13:announce-list" + lists + b"4:infod" + info_end + b"e"


# Runs the real command, and reports on stderr how much its peak resident size grew from just
# before the command (its modules imported) and the CPU time the command took.
_MEASURED = """
import json, resource, sys, time
import crawler.cli, crawler.cli.add, crawler.cli.context, crawler.torrents.items, crawler.queue.queue, redis
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.thread_time()
try:
    crawler.cli.main()
finally:
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"grew_mb": grew / 1024, "cpu": time.thread_time() - start}), file=sys.stderr)
"""


def _measured_add(env: dict, *args: str) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
    p = subprocess.run([sys.executable, "-c", _MEASURED, "add", *args, "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    *lines, figures = p.stderr.strip().splitlines()
    return p, json.loads(figures), lines


@pytest.mark.parametrize("where", ["info", "unread key", "announce-list"])
def test_an_8_mib_torrent_of_nested_lists_is_one_line_in_bounded_memory_and_time(test_env, tmp_path, where):
    path = tmp_path / "nested.torrent"
    path.write_bytes(_nested_torrent(8 * MIB, where))
    p, figures, lines = _measured_add(test_env, str(path), H)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert json.loads(p.stdout)["added"] == 1 and json.loads(p.stdout)["invalid"] == 1
    assert len(lines) == 1 and lines[0].startswith(
        f"peercrawl add: argument 1: {path} holds more than 3,000,000 values (the budget ran out at offset ")
    assert lines[0].endswith("); no real .torrent holds so many")
    # Decoding it whole took 618 MB and 10 s (a 4 MiB one: 317 MB, 4.8 s); here ~1 s, the file's 8 MiB.
    assert figures["grew_mb"] < 50, figures
    assert figures["cpu"] < 6, figures


def test_a_large_real_shaped_torrent_fits_the_budget_and_hashes_right(test_env, tmp_path):
    # 120,000 files in two-level paths (~850,000 values, 6 MiB): far more than real torrents hold.
    files = [{b"length": 1000 + i, b"path": [b"dir%d" % (i // 1000), b"file%06d.bin" % i]} for i in range(120_000)]
    info = {b"name": b"big", b"piece length": 1 << 20, b"pieces": b"\1" * 20 * 120, b"files": files}
    path = tmp_path / "big.torrent"
    path.write_bytes(bencode.encode({b"announce": b"udp://t.example:1/announce", b"info": info}))
    p, figures, lines = _measured_add(test_env, str(path))
    assert p.returncode == 0 and not lines, p.stderr
    assert json.loads(p.stdout)["added"] == 1
    assert figures["grew_mb"] < 50, figures
    assert figures["cpu"] < 6, figures
    (item,) = parse_torrent(path.read_bytes()).items
    assert item.info_hash == hashlib.sha1(bencode.encode(info)).hexdigest()
    assert item.trackers == ("udp://t.example:1/announce",)


def test_the_torrent_budget_is_counted_exactly(monkeypatch):
    # n empty lists, their list and its key "x" (n + 2), the info dictionary with its key and its
    # "pieces" key and string (4), the file's dictionary (1): n + 7 values.
    def torrent(n: int) -> bytes:
        return b"d4:infod6:pieces20:" + b"\0" * 20 + b"e1:xl" + b"le" * n + b"ee"

    assert items.TORRENT_MAX_VALUES == 3_000_000  # the 8 MiB files above meet it
    monkeypatch.setattr(items, "TORRENT_MAX_VALUES", 1000)
    assert len(parse_torrent(torrent(993)).items) == 1
    with pytest.raises(ItemError, match=r"^x.torrent holds more than 1,000 values \(the budget ran out at offset 2030\)"):
        parse_torrent(torrent(994), "x.torrent")


# --- tracker replies ------------------------------------------------------------------------------


def _cost(f) -> tuple[object, float, int]:
    """``f()``'s result (or the exception it raised), its CPU time, and its peak of Python allocations
    (bytes), measured in a second run so tracemalloc's overhead stays out of the time."""
    start = time.thread_time()
    try:
        out = f()
    except Exception as e:  # noqa: BLE001 - the error is the outcome under test
        out = e
    cpu = time.thread_time() - start
    tracemalloc.start()
    try:
        f()
    except Exception:  # noqa: BLE001 - measured above
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out, cpu, peak


def _two_mib(head: bytes, entry: bytes, tail: bytes = b"ee") -> bytes:
    return head + entry * ((2 * MIB - len(head) - len(tail)) // len(entry)) + tail


@pytest.mark.parametrize("body", [
    _two_mib(b"d5:peersl", b"de"),                  # a peers list of empty dictionaries
    _two_mib(b"d1:xl", b"de"),                      # the same under a key nobody reads
    _two_mib(b"d5:peersl", b"d2:ip9:127.0.0.14:porti6881ee"),  # 69,904 peers as dictionaries
], ids=["empty-dicts", "unread-key", "dict-peers"])
def test_a_2_mib_reply_of_a_million_values_is_refused_fast_in_little_memory(body):
    assert len(body) <= 2 * MIB
    out, cpu, peak = _cost(lambda: h.parse_announce_reply(body, 400))
    assert isinstance(out, h.HttpReplyError), out
    assert str(out).startswith("reply too large to decode: more than 100,000 values (the budget ran out at offset ")
    # Decoding it whole took 0.5-1 s and 75-93 MB; checking 100,000 values, ~0.05 s.
    assert cpu < 0.25, cpu
    assert peak < 5 * MIB, peak


def test_a_long_dictionary_peer_list_keeps_the_cap_and_counts_the_rest():
    n = 10_000  # 70,001 values, within the budget
    peers = [{b"ip": b"10.%d.%d.%d" % (i >> 16, (i >> 8) & 255, i & 255), b"port": 6881,
              b"peer id": b"-XX0001-%012d" % i} for i in range(n)]
    body = bencode.encode({b"interval": 60, b"complete": 3, b"peers": peers})
    out, cpu, peak = _cost(lambda: h.parse_announce_reply(body, 400))
    assert isinstance(out, h.HttpAnnounceReply), out
    assert out.peers == tuple((p[b"ip"].decode(), 6881) for p in peers[:400])
    assert out.cut == n - 400 and out.interval == 60 and out.complete == 3
    # Only the first 400 entries, and of each only ip and port, are built: decoding it all built
    # every dictionary (4.7 MB).
    assert peak < 1 * MIB, peak
    assert cpu < 0.5, cpu


def test_the_reply_budget_is_counted_exactly():
    # The reply, "peers" and the list (3), n peers of 5 values each (the dictionary, ip and port with
    # their keys), and k integers after them: 99,998 + k values for n = 19,999.
    def body(k: int) -> bytes:
        return b"d5:peersl" + b"d2:ip9:127.0.0.14:porti6881ee" * 19_999 + b"i7e" * k + b"ee"

    assert h.REPLY_MAX_VALUES == 100_000
    assert h.parse_announce_reply(body(2), 10).cut == 19_999 + 2 - 10
    with pytest.raises(h.HttpReplyError, match="too large to decode: more than 100,000 values"):
        h.parse_announce_reply(body(3), 10)
