"""Closing the metadata fetcher never stalls the event loop (MetadataFetcher.close).

libtorrent's session destructor waits for every uTP socket to end while
holding the GIL, and a uTP connect to a peer that does not speak uTP lives
until its connect timeout, however its fetch ended. ``close`` waits for
those in its own greenlet first.
"""

from __future__ import annotations

import hashlib
import time

import gevent

from crawler.bencode import codec as bencode
from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher
from crawler.sources.metadata.metadata_info import TorrentInfo
from tests.metadata_peers import FakePeer

# uTP's connect timeout here (3 s by default): a stall it caused could not hide under the bound below.
UTP_CONNECT_TIMEOUT_MS = 5000
# The event loop's longest stall allowed while the fetcher closes (a ticker's turn every 20 ms).
STALL_BOUND = 1.0


def test_closing_right_after_a_fetch_waits_for_utp_in_its_greenlet_not_in_the_hub():
    # The fake peer speaks TCP alone: the fetch's uTP connect to it is still trying when TCP has brought
    # the metadata and the fetcher is closed.
    info = bencode.encode({"name": "tcp only", "length": 3, "piece length": 16384, "pieces": bytes(20)})
    stalls: list[float] = []

    def ticker():
        last = time.monotonic()
        while True:
            gevent.sleep(0.02)
            now = time.monotonic()
            stalls.append(now - last)
            last = now

    settings = Settings(allow_private=True, metadata_listen=(("127.0.0.44", 0),), metadata_timeout=10.0)
    with FakePeer("127.0.0.45", info) as peer:
        f = MetadataFetcher(settings, extra={"utp_connect_timeout": UTP_CONNECT_TIMEOUT_MS})
        got = f.fetch(hashlib.sha1(info).hexdigest(), [peer.endpoint])
        assert got == TorrentInfo("tcp only", 3, 1)
        tick = gevent.spawn(ticker)
        gevent.sleep(0.1)
        started = time.monotonic()
        f.close()
        took = time.monotonic() - started
        gevent.sleep(0.1)
        tick.kill()
    assert max(stalls) < STALL_BOUND, (max(stalls), took)
    assert took < UTP_CONNECT_TIMEOUT_MS / 1000 + 2.0  # waited for the connect to time out, no longer
