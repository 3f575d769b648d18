"""Peers on loopback for the metadata fetcher's tests: real libtorrent seeders, and a fake peer of our own.

``make_torrent`` writes a few files and makes a real torrent of them with
``libtorrent.create_torrent`` (libtorrent 2 makes hybrid v1/v2 torrents, so
the info dictionary carries BEP 47 padding files between the real ones).
``Seeder`` seeds it from its own libtorrent session on one loopback address.

``FakePeer`` speaks just enough of the peer wire protocol (BEP 3 handshake,
BEP 10 extension handshake, BEP 9 ``ut_metadata`` data messages) over
gevent sockets to serve whatever metadata it is given under whatever
info-hash it is asked for: metadata that does not hash to the info-hash
is otherwise hard to serve. With ``metadata=None`` it answers the
handshakes and then says nothing (a peer that never sends the metadata). It
records the peer ids and extension handshakes it receives, which is what
a peer learns of the crawler. Given endpoints to name, it also asks the
crawler to connect elsewhere, as a hostile peer would: BEP 55
``ut_holepunch`` ``connect`` messages and a BEP 11 ``ut_pex`` ``added``
list. The wire format is built and read by the pure functions below it
(``handshake``, ``message``, ``split_messages``, ``holepunch_connect``,
``pex_added``).

``Listener`` is a TCP listener and a UDP socket on one loopback endpoint
that record every connection and datagram: where a hostile peer points
the crawler, to see whether it went.

``Delayed`` forwards connections to a real peer after a delay, so a test
can say which of two peers libtorrent hears from first.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Self

import gevent
import gevent.socket
import libtorrent as lt
from gevent.server import DatagramServer, StreamServer

from crawler.bencode import codec as bencode

PROTOCOL = b"\x13BitTorrent protocol"
HANDSHAKE_BYTES = 68
EXTENDED = 20  # BEP 10 message id
METADATA_PIECE = 16 * 1024  # BEP 9
OUR_UT_METADATA = 3  # the extended message id we ask to be sent ut_metadata under
OUR_UT_PEX = 1  # and ut_pex, ut_holepunch (the peer must offer them for libtorrent to read them)
OUR_UT_HOLEPUNCH = 4
HOLEPUNCH_CONNECT = 1  # BEP 55 msg_type


def make_torrent(root: Path, name: str, sizes: list[int]) -> tuple[bytes, str]:
    """Files of ``sizes`` bytes under ``root/name`` (one size: the file ``root/name`` itself, a single-file
    torrent), and (the .torrent's bytes, its v1 info-hash in hex)."""
    top = root / name
    if len(sizes) == 1:
        top.write_bytes(bytes(j % 251 for j in range(sizes[0])))
    else:
        top.mkdir(parents=True)
        for i, size in enumerate(sizes):
            (top / f"file{i}.bin").write_bytes(bytes((i * 7 + j) % 251 for j in range(size)))
    ct = lt.create_torrent(lt.list_files(str(top)), 16384)
    lt.set_piece_hashes(ct, str(root))
    data = lt.bencode(ct.generate())
    return data, str(lt.torrent_info(data).info_hashes().v1)


def session_on(ip: str) -> lt.session:
    """A libtorrent session listening on ``ip`` alone, talking to no one it is not told of."""
    return lt.session({"listen_interfaces": f"[{ip}]:0" if ":" in ip else f"{ip}:0", "enable_dht": False, "enable_lsd": False,
                       "enable_upnp": False, "enable_natpmp": False})


class Seeder:
    """A libtorrent session on ``ip`` seeding the torrents ``datas`` from the files under ``root``."""

    def __init__(self, ip: str, datas: list[bytes], root: Path):
        self.ip = ip
        self.session = session_on(ip)
        self.handles = []
        for data in datas:
            atp = lt.add_torrent_params()
            atp.ti = lt.torrent_info(data)
            atp.save_path = str(root)
            # Seed at once: pieces are checked as they are first asked for (none will be).
            atp.flags = lt.torrent_flags.seed_mode
            self.handles.append(self.session.add_torrent(atp))
        end = time.monotonic() + 10
        while any(h.status().state != lt.torrent_status.seeding for h in self.handles):
            assert time.monotonic() < end, "the seeder never finished checking its files"
            gevent.sleep(0.02)
        self.endpoint = (ip, self.session.listen_port())

    def uploaded(self) -> tuple[int, int]:
        """(payload bytes its torrents uploaded, every byte they uploaded: protocol included)."""
        done = [h.status() for h in self.handles]
        return sum(st.total_payload_upload for st in done), sum(st.total_upload for st in done)

    def close(self) -> None:
        self.session, self.handles = None, []


# --- the peer wire protocol, as pure functions ---------------------------------


def handshake(info_hash: bytes, peer_id: bytes) -> bytes:
    """A BEP 3 handshake saying the extension protocol (BEP 10) is spoken."""
    reserved = bytes([0, 0, 0, 0, 0, 0x10, 0, 0])
    return PROTOCOL + reserved + info_hash + peer_id


def message(msg_id: int, payload: bytes = b"") -> bytes:
    """One length-prefixed peer wire message."""
    return struct.pack(">IB", 1 + len(payload), msg_id) + payload


def extended(ext_id: int, value: dict, tail: bytes = b"") -> bytes:
    """A BEP 10 extended message: ``ext_id`` (0: the extension handshake), a bencoded dict, then ``tail``."""
    return message(EXTENDED, bytes([ext_id]) + bencode.encode(value) + tail)


def split_messages(buffer: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The whole messages at the start of ``buffer`` as (id, payload) (keep-alives left out), and the rest."""
    out = []
    while len(buffer) >= 4:
        (size,) = struct.unpack(">I", buffer[:4])
        if len(buffer) < 4 + size:
            break
        if size:
            out.append((buffer[4], buffer[5 : 4 + size]))
        buffer = buffer[4 + size :]
    return out, buffer


def holepunch_connect(ut_holepunch: int, endpoint: tuple[str, int]) -> bytes:
    """A BEP 55 ``connect`` message naming the IPv4 ``endpoint``, under the receiver's ``ut_holepunch`` id."""
    ip, port = endpoint
    body = bytes([HOLEPUNCH_CONNECT, 0]) + socket.inet_aton(ip) + struct.pack(">H", port)
    return message(EXTENDED, bytes([ut_holepunch]) + body)


def pex_added(ut_pex: int, endpoints: list[tuple[str, int]]) -> bytes:
    """A BEP 11 ``ut_pex`` message adding the IPv4 ``endpoints`` (flags: reachable, uTP and not), under the
    receiver's ``ut_pex`` id."""
    compact = b"".join(socket.inet_aton(ip) + struct.pack(">H", port) for ip, port in endpoints)
    flags = bytes(0x10 | (0x04 if i % 2 else 0) for i in range(len(endpoints)))
    return extended(ut_pex, {"added": compact, "added.f": flags})


def metadata_pieces(metadata: bytes, ut_metadata: int, piece: int) -> bytes:
    """The BEP 9 data message of ``piece`` of ``metadata``, sent under the asker's ``ut_metadata`` id."""
    chunk = metadata[piece * METADATA_PIECE : (piece + 1) * METADATA_PIECE]
    return extended(ut_metadata, {"msg_type": 1, "piece": piece, "total_size": len(metadata)}, chunk)


# --- the fake peer ---------------------------------------------------------------


class FakePeer:
    """A peer on ``ip`` that serves ``metadata`` (bytes, or None: never) for any info-hash.

    ``times``: how many data messages it sends in all (None: no end); past
    them it hangs up and, on later connections, says it has no metadata.
    ``holepunch``, ``pex``: endpoints it names to the crawler, each in a
    ``ut_holepunch`` ``connect`` message and all in one ``ut_pex`` ``added``
    message, once the crawler's extension handshake is in (``pex`` only if
    the crawler offers ``ut_pex``); ``named`` counts the messages sent.
    ``gate``: an event the metadata waits for (None: none).

    ``peer_ids``: the peer ids of the handshakes it received;
    ``hello``: the extension handshakes it received, decoded;
    ``requests``: (msg id, payload) of every message it received after the
    handshakes (a piece request would be id 6).
    """

    def __init__(self, ip: str, metadata: bytes | None, times: int | None = None,
                 holepunch: list[tuple[str, int]] = (), pex: list[tuple[str, int]] = (), gate=None):
        self.metadata, self.times, self.gate = metadata, times, gate
        self.holepunch, self.pex = list(holepunch), list(pex)
        self.named = 0
        self.peer_ids: list[bytes] = []
        self.hello: list[dict] = []
        self.requests: list[tuple[int, bytes]] = []
        self.server = StreamServer((ip, 0), self._serve)
        self.server.start()
        self.endpoint = (ip, self.server.server_port)

    def _serve(self, sock, _address) -> None:
        sock.settimeout(30)
        data = b""
        try:
            while len(data) < HANDSHAKE_BYTES:
                got = sock.recv(4096)
                if not got:
                    return
                data += got
                if not PROTOCOL.startswith(data[:20]):
                    return  # an encrypted handshake (BEP 8 / MSE): hang up, libtorrent retries in plain
            info_hash, their_id = data[28:48], data[48:68]
            self.peer_ids.append(their_id)
            sock.sendall(handshake(info_hash, b"-XX0000-fakepeer0000"))
            hello = {"m": {"ut_metadata": OUR_UT_METADATA, "ut_pex": OUR_UT_PEX, "ut_holepunch": OUR_UT_HOLEPUNCH}}
            if self.metadata is not None and self.times != 0:
                hello["metadata_size"] = len(self.metadata)
            sock.sendall(extended(0, hello))
            self._talk(sock, data[HANDSHAKE_BYTES:])
        except OSError:
            return
        finally:
            sock.close()

    def _talk(self, sock, buffer: bytes) -> None:
        theirs = None  # their ut_metadata id
        while True:
            messages, buffer = split_messages(buffer)
            for msg_id, payload in messages:
                if msg_id == EXTENDED and payload[:1] == b"\0":
                    self.hello.append(bencode.decode(payload[1:]))
                    offered = self.hello[-1].get(b"m", {})
                    theirs = offered.get(b"ut_metadata")
                    self._name(sock, offered)
                    continue
                self.requests.append((msg_id, payload))
                if msg_id == EXTENDED and payload[0] == OUR_UT_METADATA and self.metadata is not None and theirs:
                    ask, _ = bencode.decode_prefix(payload, 1)
                    if ask.get(b"msg_type") == 0 and self.times != 0:
                        if self.gate is not None:
                            self.gate.wait()
                        sock.sendall(metadata_pieces(self.metadata, theirs, ask[b"piece"]))
                        if self.times is not None:
                            self.times -= 1
                            if self.times == 0:
                                return
            got = sock.recv(65536)
            if not got:
                return
            buffer += got

    def _name(self, sock, offered: dict) -> None:
        """Name the endpoints of ``holepunch`` and ``pex`` to the crawler, under the ids it ``offered``."""
        if self.holepunch and offered.get(b"ut_holepunch"):
            sock.sendall(b"".join(holepunch_connect(offered[b"ut_holepunch"], e) for e in self.holepunch))
            self.named += len(self.holepunch)
        if self.pex and offered.get(b"ut_pex"):
            sock.sendall(pex_added(offered[b"ut_pex"], self.pex))
            self.named += 1

    def close(self) -> None:
        self.server.stop(timeout=1)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Listener:
    """A TCP listener and a UDP socket on one ``ip`` and port; ``contacts``: ("tcp" | "udp", from) of each
    connection accepted and datagram received."""

    def __init__(self, ip: str):
        self.contacts: list[tuple[str, tuple]] = []
        for _ in range(20):  # the UDP port of the TCP port the system picked may be taken
            self.tcp = StreamServer((ip, 0), lambda sock, address: (self.contacts.append(("tcp", address)), sock.close()))
            self.tcp.start()
            self.endpoint = (ip, self.tcp.server_port)
            self.udp = DatagramServer(self.endpoint, lambda _data, address: self.contacts.append(("udp", address)))
            try:
                self.udp.start()
                return
            except OSError:
                self.tcp.stop()
        raise OSError(f"no port on {ip} free for both TCP and UDP")

    def close(self) -> None:
        self.tcp.stop(timeout=1)
        self.udp.stop(timeout=1)


class Delayed:
    """A TCP forwarder on ``ip`` to ``target`` that holds each connection ``delay`` seconds before passing bytes.

    It connects to ``target`` from ``ip``, so the target does not take it for
    the crawler (on 127.0.0.1), which it may be connecting to already: a
    second connection from one address is dropped as a duplicate.
    """

    def __init__(self, ip: str, target: tuple[str, int], delay: float):
        self.ip, self.target, self.delay = ip, target, delay
        self.server = StreamServer((ip, 0), self._serve)
        self.server.start()
        self.endpoint = (ip, self.server.server_port)

    def _serve(self, sock, _address) -> None:
        gevent.sleep(self.delay)
        try:
            upstream = gevent.socket.create_connection(self.target, timeout=5, source_address=(self.ip, 0))
        except OSError:
            sock.close()
            return
        pipes = [gevent.spawn(_pipe, sock, upstream), gevent.spawn(_pipe, upstream, sock)]
        gevent.joinall(pipes, count=1)
        sock.close()
        upstream.close()
        gevent.killall(pipes)

    def close(self) -> None:
        self.server.stop(timeout=1)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pipe(source, sink) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
