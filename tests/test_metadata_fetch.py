"""The metadata fetcher against real libtorrent seeders and a fake peer of our own, all on loopback.

Two seeders (127.0.0.2 and .3, each its own libtorrent session) seed a
hybrid multi-file torrent and a single-file one made here; the fetcher
(bound to 127.0.0.1) learns their names, sizes and file counts from them
and moves no payload either way. A fake peer (tests/metadata_peers.py)
serves another torrent's info dictionary under the info-hash asked for,
or stays silent. The fake peer speaks TCP only, so the fetchers that meet
it have outgoing uTP off: libtorrent tries uTP first and gives up on it
only after ~3 s.
"""

from __future__ import annotations

import hashlib
import os
import re
import string
import time

import gevent
import libtorrent as lt
import pytest
from gevent.event import Event

from crawler.bencode import codec as bencode
from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.sources.metadata.metadata_fetch import MetadataFetcher, NoMetadata
from crawler.sources.metadata.metadata_info import TorrentInfo
from crawler.sources.metadata.metadata_session import allow_only, magnet_params, new_session
from tests.metadata_peers import Delayed, FakePeer, Seeder, make_torrent

TCP_ONLY = {"enable_outgoing_utp": False}
# libtorrent's peer ids without a fingerprint: 20 characters of this alphabet.
URL_SAFE = set((string.ascii_letters + string.digits + "-_.!~*()").encode())
# A client's fingerprint (BEP 20, Azureus style: -LT2110-); a random id starts with "-" once in 72.
FINGERPRINT = re.compile(rb"-[A-Za-z]{2}[0-9]{4}-")
PIECE_REQUEST = 6


class Swarm:
    """Two torrents (``multi``: three files, ``single``: one), their info-hashes and their seeders."""

    def __init__(self, root):
        self.multi, self.multi_hash = make_torrent(root, "Tést torrent — three files", [40_000, 1, 70_000])
        self.single, self.single_hash = make_torrent(root, "single.iso", [50_000])
        self.seeders = [Seeder(ip, [self.multi, self.single], root) for ip in ("127.0.0.2", "127.0.0.3")]
        self.peers = [s.endpoint for s in self.seeders]


@pytest.fixture(scope="module")
def swarm(tmp_path_factory):
    s = Swarm(tmp_path_factory.mktemp("seeded"))
    yield s
    for seeder in s.seeders:
        seeder.close()


def fetcher_settings(**kw) -> Settings:
    kw.setdefault("metadata_timeout", 10.0)
    return Settings(allow_private=True, metadata_listen=(("127.0.0.1", 0),), **kw)


def closed_port() -> int:
    """A loopback TCP port nothing listens on."""
    s = gevent.socket.socket()
    s.bind(("127.0.0.7", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_fetch_learns_name_size_and_files_and_no_payload_moves(swarm):
    before = [seeder.uploaded() for seeder in swarm.seeders]
    with MetadataFetcher(fetcher_settings()) as f:
        assert f.fetch(swarm.multi_hash, swarm.peers) == TorrentInfo("Tést torrent — three files", 110_001, 3)
        assert f.fetch(swarm.single_hash, swarm.peers) == TorrentInfo("single.iso", 50_000, 1)
        gevent.sleep(0.5)  # what a late piece would take to land
        assert os.listdir(f.save_path) == []
        counters = f.counters()
        assert counters["net.recv_payload_bytes"] == 0 and counters["net.sent_payload_bytes"] == 0
        assert f.stats()["outcomes"] == {"ok": 2}
        save_path = f.save_path
    # libtorrent adds a torrent's transfer to its totals once a second, later on a loaded machine
    end = time.monotonic() + 10
    while time.monotonic() < end and not all(s.uploaded()[1] > b for s, (_, b) in zip(swarm.seeders, before)):
        time.sleep(0.2)
    for seeder, (payload_before, everything_before) in zip(swarm.seeders, before):
        payload, everything = seeder.uploaded()
        assert payload == payload_before
        assert everything > everything_before  # they did talk to us: the metadata went over the wire
    assert not os.path.exists(save_path)


@pytest.mark.parametrize("flags", ["ours", "libtorrent's defaults"])
def test_the_magnets_flags_alone_download_nothing(swarm, tmp_path, flags):
    # The fetcher removes a torrent as soon as its metadata is read; here it stays, to show the flags (not
    # the haste) keep payload off. With libtorrent's default flags the same magnet downloads the files: the
    # test can see a download. The seeders are let through the session's filter as a fetch lets its peers.
    session = new_session(fetcher_settings())
    session.set_ip_filter(allow_only([ip for ip, _ in swarm.peers], allow_private=True))
    atp = magnet_params(bytes.fromhex(swarm.multi_hash), swarm.peers, str(tmp_path))
    if flags != "ours":
        atp.flags = lt.torrent_flags.apply_ip_filter
    handle = session.add_torrent(atp)
    end = time.monotonic() + 5
    while not handle.status().has_metadata:
        assert time.monotonic() < end, "no metadata"
        gevent.sleep(0.02)
    gevent.sleep(1.0)
    status = handle.status()
    if flags == "ours":
        assert status.total_payload_download == 0 and os.listdir(tmp_path) == []
        assert set(handle.get_file_priorities()) == {0} and handle.flags() & lt.torrent_flags.upload_mode
    else:
        assert status.total_payload_download >= 110_001 and os.listdir(tmp_path)  # padding comes too
    session.remove_torrent(handle)


def test_metadata_that_does_not_hash_to_the_info_hash_is_refused(swarm):
    # One liar serves the single-file torrent's info dictionary under the multi-file one's info-hash; the
    # other serves the multi-file one's with a byte of its piece hashes changed (the last value is "pieces"),
    # once, then hangs up (libtorrent keeps asking a peer that lies on and on: docs/metadata.md).
    other = bytes(lt.torrent_info(swarm.single).info_section())
    true = bytes(lt.torrent_info(swarm.multi).info_section())
    forged = true[:-2] + bytes([true[-2] ^ 1]) + true[-1:]
    with FakePeer("127.0.0.4", other) as liar, FakePeer("127.0.0.9", forged, times=1) as forger, \
            Delayed("127.0.0.10", swarm.peers[0], 1.0) as late_seeder, \
            MetadataFetcher(fetcher_settings(metadata_timeout=2.0), extra=TCP_ONLY) as f:
        got = f.fetch(swarm.multi_hash, [liar.endpoint])
        assert isinstance(got, NoMetadata) and got.kind == "bad_metadata", got
        assert "did not hash to the info-hash" in got.reason
        # Metadata of the right size but wrong bytes, sent first (the seeder is a second late), is refused,
        # and the seeder beside it is asked next.
        f.timeout = 5.0
        got = f.fetch(swarm.multi_hash, [forger.endpoint, late_seeder.endpoint])
        assert got == TorrentInfo("Tést torrent — three files", 110_001, 3), got.reason
        assert f.stats()["outcomes"] == {"bad_metadata": 1, "ok": 1}
        assert os.listdir(f.save_path) == []
    assert forger.times == 0  # it was asked, and lied
    # What the peers learned of us: a random peer id naming no client, no client version, no piece asked for.
    for peer in (liar, forger):
        assert peer.peer_ids and peer.hello
        for peer_id in peer.peer_ids:
            assert len(peer_id) == 20 and set(peer_id) <= URL_SAFE and not FINGERPRINT.match(peer_id)
        for hello in peer.hello:
            assert b"v" not in hello and b"ut_metadata" in hello[b"m"]
        assert PIECE_REQUEST not in {msg_id for msg_id, _ in peer.requests}
    assert set(liar.peer_ids).isdisjoint(forger.peer_ids)  # a new one for each torrent added


def test_a_fetch_nobody_answers_ends_at_its_deadline_with_a_reason():
    timeout = 1.5
    with FakePeer("127.0.0.5", None) as silent, \
            MetadataFetcher(fetcher_settings(metadata_timeout=timeout), extra=TCP_ONLY) as f:
        started = time.monotonic()
        quiet = gevent.spawn(f.fetch, os.urandom(20).hex(), [silent.endpoint])
        gone = gevent.spawn(f.fetch, os.urandom(20).hex(), [("127.0.0.7", closed_port())])
        gevent.joinall([quiet, gone], raise_error=True)
        took = time.monotonic() - started
        assert quiet.value.kind == "timeout" and "1 connecting or connected" in quiet.value.reason, quiet.value
        assert gone.value.kind == "unreachable" and "Connection refused" in gone.value.reason, gone.value
        assert timeout - 0.1 <= took < timeout + 1.0
        assert silent.peer_ids  # it was reached, and said nothing


def test_fetches_in_flight_are_bounded(swarm):
    # Two slots, taken by two fetches whose peers hold the metadata back until the test opens a gate: the
    # two fetches that come next can only end "no_slot" at their deadline, and the same torrent asked again
    # is "busy". Then the gate opens and the two holders get their metadata.
    gate = Event()
    infos = [bencode.encode({"name": f"held {i}", "length": 1, "piece length": 16384, "pieces": bytes(20)})
             for i in range(2)]
    hashes = [hashlib.sha1(info).hexdigest() for info in infos]
    with FakePeer("127.0.0.6", infos[0], gate=gate) as p0, FakePeer("127.0.0.33", infos[1], gate=gate) as p1, \
            MetadataFetcher(fetcher_settings(metadata_timeout=60.0, metadata_in_flight=2), extra=TCP_ONLY) as f:
        holders = [gevent.spawn(f.fetch, h, [p.endpoint]) for h, p in zip(hashes, (p0, p1))]
        end = time.monotonic() + 10
        while f.stats()["torrents"] < 2:
            assert time.monotonic() < end, "the two holders never took their slots"
            gevent.sleep(0.01)
        f.timeout = 0.5
        waiters = [gevent.spawn(f.fetch, os.urandom(20).hex(), [p0.endpoint]) for _ in range(2)]
        twice = f.fetch(hashes[0], [p0.endpoint])  # already running
        gevent.joinall(waiters, raise_error=True)
        assert [w.value.kind for w in waiters] == ["no_slot", "no_slot"], [w.value for w in waiters]
        assert twice.kind == "busy"
        gate.set()
        gevent.joinall(holders, raise_error=True)
        assert [h.value for h in holders] == [TorrentInfo("held 0", 1, 1), TorrentInfo("held 1", 1, 1)]
        assert f.stats()["peak"] == 2
    # One slot: two fetches take turns, and both get their metadata.
    with MetadataFetcher(fetcher_settings(metadata_in_flight=1)) as f:
        jobs = [gevent.spawn(f.fetch, h, swarm.peers) for h in (swarm.multi_hash, swarm.single_hash)]
        gevent.joinall(jobs, raise_error=True)
        assert [type(j.value) for j in jobs] == [TorrentInfo, TorrentInfo], [j.value for j in jobs]
        assert f.stats()["peak"] == 1


def test_peers_the_address_policy_refuses_are_never_asked(swarm):
    settings = fetcher_settings().replace(allow_private=False)
    with MetadataFetcher(settings) as f:
        got = f.fetch(swarm.multi_hash, swarm.peers + [("not an ip", 1), ("8.8.8.8", 0)])
        assert got.kind == "no_peers" and "4 refused" in got.reason, got
        assert f.stats()["peak"] == 0
        with pytest.raises(ValueError):
            f.fetch("ab" * 19, swarm.peers)


def test_close_wakes_a_waiting_fetch():
    with FakePeer("127.0.0.8", None) as silent:
        f = MetadataFetcher(fetcher_settings(), extra=TCP_ONLY)
        job = gevent.spawn(f.fetch, os.urandom(20).hex(), [silent.endpoint])
        gevent.sleep(0.3)
        started = time.monotonic()
        f.close()
        job.join(timeout=2)
        assert job.value == NoMetadata("closed", "metadata fetcher closed")
        assert time.monotonic() - started < 1
        f.close()


def test_the_settings_default_off_and_refuse_bad_values_in_one_line():
    s = Settings.from_env({})
    assert (s.metadata, s.metadata_in_flight, s.metadata_timeout) == (False, 8, 20.0)
    assert s.metadata_listen == (("0.0.0.0", 0), ("::", 0))
    s = Settings.from_env({"PEERCRAWL_METADATA": "on", "PEERCRAWL_METADATA_LISTEN": "127.0.0.1:7000,[::1]:0"})
    assert s.metadata and s.metadata_listen == (("127.0.0.1", 7000), ("::1", 0))
    for name, value, says in [
        ("PEERCRAWL_METADATA", "sometimes", "on or off"),
        ("PEERCRAWL_METADATA_IN_FLIGHT", "0", "from 1 to 256"),
        ("PEERCRAWL_METADATA_TIMEOUT", "0.1", "from 0.5 to 600"),
        ("PEERCRAWL_METADATA_TIMEOUT", "nan", "from 0.5 to 600"),
        ("PEERCRAWL_METADATA_LISTEN", "peers.example:1", "IP address"),
        ("PEERCRAWL_METADATA_LISTEN", ",", "expected ip:port"),
    ]:
        with pytest.raises(SettingsError) as e:
            Settings.from_env({name: value})
        msg = str(e.value)
        assert msg.startswith(name + ":") and says in msg and "\n" not in msg, msg
