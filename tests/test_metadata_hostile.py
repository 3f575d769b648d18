"""The metadata fetcher against a hostile peer, on loopback: where it can send the fetcher, and what its
metadata costs the event loop.

A peer handed to a fetch can name other endpoints: BEP 55 ``ut_holepunch``
``connect`` messages (libtorrent connects to the endpoint at once, past its
connection limit) and BEP 11 ``ut_pex`` ``added`` lists. The fetcher must
connect to the peers handed to its fetches and to no one else, so the
endpoints named here are real TCP listeners and UDP sockets, and none may
hear from it. Loopback is private, so these fetchers allow private
addresses: what stops them is the fetcher's allow-list, not the address
policy.

A peer can also serve metadata that is costly to read: an info dictionary
of 150,000 files that hashes right (whoever wrote it can make a torrent of
it) and that libtorrent accepts. A ticker greenlet measures the longest
time the event loop went without running it while the fetcher took it in.
"""

from __future__ import annotations

import hashlib
import os
import time

import gevent
import pytest

from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher, NoMetadata
from crawler.sources.metadata.metadata_info import MAX_FILES, MAX_METADATA_BYTES, TorrentInfo
from crawler.sources.metadata.metadata_session import allow_only
from tests.metadata_peers import FakePeer, Listener

TCP_ONLY = {"enable_outgoing_utp": False}
# libtorrent gives up on uTP to a peer that does not answer it after utp_connect_timeout (3 s by default)
# and tries TCP, which the fake peer speaks.
UTP_FIRST = {"utp_connect_timeout": 500}
# The event loop's longest stall allowed while 3.9 MiB of metadata is taken in and read. Read on the loop
# in one go, it stalled 1 to 1.8 s; read in slices, the longest stall measured was 5 to 10 ms on a busy
# two-core machine: room for a machine busier still.
HUB_STALL_BOUND = 0.2


def fetcher_settings(**kw) -> Settings:
    kw.setdefault("metadata_timeout", 10.0)
    return Settings(allow_private=True, metadata_listen=(("127.0.0.1", 0),), **kw)


@pytest.mark.parametrize("transport", ["tcp", "utp"])
def test_a_peer_cannot_send_the_fetcher_to_anyone_it_was_not_handed(transport):
    listeners = [Listener(f"127.0.0.{i}") for i in range(11, 31)]
    named = [listener.endpoint for listener in listeners]
    try:
        with FakePeer("127.0.0.31", None, holepunch=named, pex=named) as hostile, \
                MetadataFetcher(fetcher_settings(metadata_timeout=5.0),
                                extra=TCP_ONLY if transport == "tcp" else UTP_FIRST) as f:
            got = f.fetch(os.urandom(20).hex(), [hostile.endpoint])
            gevent.sleep(0.5)  # a connection asked for late would have started by now
        assert hostile.peer_ids and hostile.named >= len(named), "the handed peer was not reached"
        assert isinstance(got, NoMetadata) and got.kind == "timeout", got
        contacted = {listener.endpoint: listener.contacts for listener in listeners if listener.contacts}
        assert contacted == {}, f"{len(contacted)} of {len(named)} named endpoints contacted"
        # Peer exchange is not even offered, and the endpoints named by holepunch were refused.
        assert all(b"ut_pex" not in hello[b"m"] for hello in hostile.hello)
        assert f"{len(named)} endpoints named by peers refused" in got.reason, got
    finally:
        for listener in listeners:
            listener.close()


def many_files(n: int) -> bytes:
    """An info dictionary of ``n`` one-byte files with 4-character names (libtorrent refuses too many
    names that are the same but for case, so lowercase only)."""
    digits = b"0123456789abcdefghijklmnopqrstuvwxyz"
    files = b"".join(b"d6:lengthi1e4:pathl4:%bee" % bytes(digits[i // 36**k % 36] for k in range(4))
                     for i in range(n))
    pieces = -(-n // 16384)
    return (b"d5:filesl" + files + b"e4:name7:hostile12:piece lengthi16384e6:pieces%d:" % (20 * pieces)
            + bytes(20 * pieces) + b"e")


def test_metadata_of_150_000_files_does_not_stall_the_event_loop():
    info = many_files(150_000)
    assert 3.8 * 2**20 < len(info) <= MAX_METADATA_BYTES
    gaps, last = [], [0.0]

    def ticker():
        last[0] = time.monotonic()
        while True:
            gevent.sleep(0.002)
            now = time.monotonic()
            gaps.append(now - last[0])
            last[0] = now

    with FakePeer("127.0.0.32", info) as peer, \
            MetadataFetcher(fetcher_settings(metadata_timeout=60.0), extra=TCP_ONLY) as f:
        tick = gevent.spawn(ticker)
        try:
            got = f.fetch(hashlib.sha1(info).hexdigest(), [peer.endpoint])
        finally:
            gaps.append(time.monotonic() - last[0])  # a stall that ends with the fetch
            tick.kill()
    assert got == TorrentInfo("hostile", None, 150_000), got
    assert 150_000 > MAX_FILES  # the sizes past MAX_FILES are not added up: total_size None
    assert len(gaps) > 10 and max(gaps) < HUB_STALL_BOUND, f"the event loop stalled {max(gaps):.3f} s"


def test_the_allow_list_lets_through_the_addresses_it_is_given_and_the_policy_allows_and_no_other():
    # Only built and read, never used to connect: no address here is contacted.
    given = ["1.1.1.1", "2606:4700:4700::1111", "127.0.0.5", "10.0.0.1", "::1", "::ffff:10.0.0.2"]
    public = allow_only(given, allow_private=False)
    assert [public.access(ip) for ip in given] == [0, 0, 1, 1, 1, 1]  # 0: allowed, 1: blocked
    assert [public.access(ip) for ip in ("1.1.1.2", "1.1.1.0", "2606:4700:4700::1112", "0.0.0.0")] == [1, 1, 1, 1]
    private = allow_only(given, allow_private=True)
    assert [private.access(ip) for ip in given] == [0] * len(given)
    assert private.access("127.0.0.6") == 1 and allow_only([], allow_private=True).access("127.0.0.1") == 1
