"""The metadata fetcher tries every peer over TCP and uTP at once (crawler/sources/metadata/metadata_session.py).

In one libtorrent session a peer is tried over uTP first and over TCP only
after the uTP connect failed (``utp_connect_timeout``). Here uTP's connect
timeout is past the fetch's deadline: a fetcher that tried TCP only after
uTP would never reach the listener over TCP. Both transports leave from the
fetcher's listen address.
"""

from __future__ import annotations

import os

from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher
from tests.metadata_peers import Listener

FETCHER = "127.0.0.46"


def test_a_peer_is_tried_over_tcp_and_utp_at_once_from_the_listen_address():
    listener = Listener("127.0.0.47")
    try:
        settings = Settings(allow_private=True, metadata_listen=((FETCHER, 0),), metadata_timeout=2.0)
        with MetadataFetcher(settings, extra={"utp_connect_timeout": 4000}) as f:
            got = f.fetch(os.urandom(20).hex(), [listener.endpoint])
        assert got.kind in ("timeout", "unreachable"), got  # it hangs up at once: no metadata
        transports = {kind for kind, _ in listener.contacts}
        sources = {address[0] for _, address in listener.contacts}
        assert transports == {"tcp", "udp"}, listener.contacts
        assert sources == {FETCHER}, listener.contacts
        assert "tried over TCP and uTP" in got.reason, got
    finally:
        listener.close()
