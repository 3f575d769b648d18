"""The metadata fetcher's libtorrent sessions, one per transport, and the magnets they add: what keeps payload off, and what peers see.

Nothing here waits on libtorrent; ``crawler.sources.metadata.metadata_fetch`` uses it.

The sessions (``session_params``) are the fetcher's own, apart from the DHT's,
one per transport (``TRANSPORTS``): a fetch adds its torrent to both, so a
peer is tried over TCP and over uTP at once and the first to bring the
metadata wins. In one session libtorrent tries uTP first and TCP only once
uTP failed, after ``utp_connect_timeout`` (3 s) and a reconnect: a peer that
does not speak uTP (aria2, rtorrent) or whose UDP port drops it answered
after 3.5 to 5 s instead of 0.05 to 1 s. Nothing else does it: the
per-peer choice is libtorrent's (``supports_utp``, true for every new peer,
cleared only by a failed uTP connect), one endpoint is one peer of a
torrent, and one session holds one torrent per info-hash; and
``mixed_mode_algorithm`` shares bandwidth between the two, it chooses no
transport. ``transports(extra)`` leaves a transport out when ``extra`` turns
its outgoing connections off (tests).

- They connect out, to the peers they are handed, and to no one else: DHT,
  local service discovery, UPnP and NAT-PMP are off, no tracker is ever
  added, and incoming TCP and uTP connections are refused. The uTP session
  listens (``PEERCRAWL_METADATA_LISTEN``) because outgoing uTP goes out of
  the listen socket's UDP port; the TCP session listens nowhere (outgoing
  TCP binds no listen socket, and with none libtorrent sends no listen
  port, ``p``, in the extension handshake). Its connections leave from
  the listen address when that is one address (``outgoing``), else from
  the address the system picks.
- Their extensions: ``ut_metadata`` alone of libtorrent's plugins (the
  session is made without its default ones, so ``ut_pex`` is not even
  offered, and ``smart_ban`` has no piece to judge). ``ut_holepunch``
  (BEP 55) is built into libtorrent's peer connections, with no setting to
  turn it off: a peer's ``connect`` message adds the endpoint it names to
  the torrent and connects to it at once, past the connection limit.
- So the IP filter is an allow-list (``allow_only``): every address is
  blocked but those of the peers handed to the fetches in flight (each
  fetch's checked and cut by ``handed_peers``). libtorrent applies it to
  every peer a torrent adds, whoever named it (holepunch, peer exchange,
  the magnet's own peers), and to incoming connections. The fetcher sets
  it anew each time a fetch adds its torrent and each time one is removed.
  The address policy (contract §3) holds in it too: an address the policy
  refuses (``addresses.check``) is never allowed, whoever hands it over.
  What it cannot say is a port: a peer can name another port of an
  allowed address.
- Their identity is neutral: ``peer_fingerprint`` empty, so the 20-byte peer id
  is 20 random characters of libtorrent's URL-safe alphabet, new for every
  session (no ``-LT2110-`` prefix naming a client); ``anonymous_mode`` on,
  so the extension handshake carries no client version (``v``);
  ``user_agent`` empty, though with no tracker and no web seed nothing would
  send it.
- ``max_metadata_size``: libtorrent drops a peer that announces metadata
  larger than ``metadata_info.MAX_METADATA_BYTES``.

The torrents (``magnet_params``): a v1 info-hash with its peers, added with
flags such that no payload is requested, and none could be uploaded. Read
in libtorrent 2.1's source (src/torrent.cpp, src/peer_connection.cpp,
src/request_blocks.cpp):

- ``upload_mode``: every path that asks a peer for a block returns first
  when the torrent is in upload mode (``request_a_block``,
  ``peer_connection::add_request``, ``send_block_requests``), so no piece
  request is ever sent. This is the flag that guarantees no download.
- ``auto_managed`` off: an auto-managed torrent is taken out of upload mode
  every ``optimistic_disk_retry`` seconds; a torrent that is not auto-managed
  leaves it only if told to, which nothing here does.
- ``default_dont_download``: once the metadata is in, every file's priority
  is 0 (set in ``torrent::init``, on libtorrent's thread, before any piece
  could be picked), so even outside upload mode the picker has nothing.
- No payload can go up: the torrent has no piece (nothing is downloaded and
  the save path is an empty directory, so the check that follows the
  metadata finds nothing), and a peer can only be sent pieces we have.
- ``stop_when_ready`` is not used: libtorrent counts fetching metadata as a
  downloading state, so the flag pauses a magnet the moment it starts
  connecting, before any metadata (libtorrent's own doc says so, and a
  test run showed it: paused at "dl metadata", nothing fetched).
- ``disable_dht``, ``disable_lsd``, ``disable_pex``: the torrent asks no one
  for more peers. ``apply_ip_filter`` is kept (the flags replace
  libtorrent's defaults, which hold it): the allow-list holds for these
  torrents. Not ``paused``, not ``seed_mode``, not ``share_mode``
  (share mode downloads to upload).

The fetcher removes each torrent as soon as its metadata is read or its
deadline passes (files never deleted: nothing was written).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import libtorrent as lt

from crawler import logs
from crawler.errors import SettingsError
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.addresses import AddressRefused, check
from crawler.sources.dht_listen import is_v6, usable
from crawler.sources.metadata.metadata_info import MAX_METADATA_BYTES

log = logs.get(__name__)

# Peers of one fetch handed to libtorrent: a few answer within seconds if
# any do; more would only spend the session's connection budget.
PEERS_PER_FETCH = 30
# Connections the session may hold beyond the fetches' peers (half-open
# ones being torn down).
SPARE_CONNECTIONS = 16
# Peer and connection alerts of every fetch (a few per peer) fit many times over.
ALERT_QUEUE_SIZE = 10_000
# One session each: a fetch tries its peers over both at once.
TRANSPORTS = ("tcp", "utp")

# libtorrent.session's flags: none, so none of its default plugins (``new_session`` adds ut_metadata).
NO_DEFAULT_PLUGINS = 0
# ip_filter rule flags.
ALLOWED, BLOCKED = 0, 1
_EVERY_ADDRESS = (("0.0.0.0", "255.255.255.255"), ("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))

FLAGS = (
    lt.torrent_flags.apply_ip_filter
    | lt.torrent_flags.upload_mode
    | lt.torrent_flags.default_dont_download
    | lt.torrent_flags.disable_dht
    | lt.torrent_flags.disable_lsd
    | lt.torrent_flags.disable_pex
)


def listening(listen: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """The addresses of ``listen`` this machine can use: an IPv6 one it cannot (``dht_listen.usable``) is
    left out, with one warning; IPv6 peers are then out of reach. Raises ``SettingsError`` if none is left."""
    kept, why = [], None
    for ip, port in listen:
        reason = usable(ip, []) if is_v6(ip) else None
        if reason is None:
            kept.append((ip, port))
        else:
            why = why or reason
    if not kept:
        raise SettingsError(f"PEERCRAWL_METADATA_LISTEN: no address this machine can use ({why or 'none given'})")
    if why is not None:
        log.warning("metadata_ipv6_unusable", reason=why, listen=listen_text(kept))
    return tuple(kept)


def outgoing(listen: tuple[tuple[str, int], ...]) -> str:
    """Where outgoing TCP connections leave from (libtorrent's ``outgoing_interfaces``): the listen address
    when ``listen`` is one address and not a wildcard, so TCP leaves from where uTP does; else "" (the
    system's choice: libtorrent takes the entries in turn whatever the peer's family, so two would send
    half the connections out of an address of the wrong family)."""
    if len(listen) == 1 and not ipaddress.ip_address(listen[0][0]).is_unspecified:
        return listen[0][0]
    return ""


def transports(extra: dict | None = None) -> tuple[str, ...]:
    """The transports the fetcher runs a session for: both, but one whose outgoing connections ``extra``
    turns off (``enable_outgoing_tcp`` / ``enable_outgoing_utp`` false)."""
    extra = extra or {}
    return tuple(t for t in TRANSPORTS if extra.get(f"enable_outgoing_{t}", True))


def session_params(settings: Settings, transport: str = "utp") -> dict:
    """The settings pack of the fetcher's session for ``transport`` (see the module's docstring)."""
    cat = lt.alert.category_t
    listen = listening(settings.metadata_listen)
    return {
        "listen_interfaces": listen_text(listen) if transport == "utp" else "",
        "outgoing_interfaces": outgoing(listen) if transport == "tcp" else "",
        "enable_outgoing_tcp": transport == "tcp",
        "enable_outgoing_utp": transport == "utp",
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "enable_incoming_tcp": False,
        "enable_incoming_utp": False,
        "peer_fingerprint": "",
        "user_agent": "",
        "handshake_client_version": "",
        "anonymous_mode": True,
        "max_metadata_size": MAX_METADATA_BYTES,
        "connections_limit": settings.metadata_in_flight * PEERS_PER_FETCH + SPARE_CONNECTIONS,
        # libtorrent's default, pinned: a torrent keeps one peer per address, so a peer naming ports of an
        # allowed address gets one connection tried at a time.
        "allow_multiple_connections_per_ip": False,
        "alert_queue_size": ALERT_QUEUE_SIZE,
        # status: added, metadata received, removed; error: metadata failed,
        # listen failed; connect: each peer tried and dropped; ip_block: a
        # peer the IP filter refused. Replies to requests (resume data,
        # session stats) come whatever the mask.
        "alert_mask": cat.status_notification | cat.error_notification | cat.connect_notification
        | cat.ip_block_notification,
    }


def new_session(settings: Settings, extra: dict | None = None, transport: str = "utp"):
    """The fetcher's ``libtorrent.session`` for ``transport``: ut_metadata its one plugin, every address blocked
    until a fetch allows its peers (``allow_only``); ``extra`` overrides settings (tests)."""
    params = session_params(settings, transport)
    params.update(extra or {})
    # libtorrent's stubs want a settings_pack TypedDict, which lacks settings the binding knows
    # (handshake_client_version, above); the binding takes any dict of settings
    session = lt.session(params, NO_DEFAULT_PLUGINS)  # type: ignore[call-overload]
    session.add_extension("ut_metadata")
    session.set_ip_filter(allow_only((), settings.allow_private))
    return session


def handed_peers(peers: Iterable[tuple[str, int]], allow_private: bool) -> tuple[list[tuple[str, int]], int]:
    """(the first ``PEERS_PER_FETCH`` distinct peers of ``peers`` to hand libtorrent, how many were left
    out: the address policy refused them, the IP was malformed or the port outside 1-65535)."""
    given: list[tuple[str, int]] = []
    refused = 0
    for ip, port in peers:
        try:
            ip = str(ipaddress.ip_address(ip))
            if not (type(port) is int and 0 < port < 65536):
                raise ValueError(port)
            check(ip, allow_private, "metadata peer")
        except (ValueError, AddressRefused):
            refused += 1
            continue
        if (ip, port) not in given and len(given) < PEERS_PER_FETCH:
            given.append((ip, port))
    return given, refused


def allow_only(addresses: Iterable[str], allow_private: bool):
    """A ``libtorrent.ip_filter`` that blocks every IPv4 and IPv6 address but each of ``addresses`` the
    address policy lets through (non-public ones only if ``allow_private``)."""
    f = lt.ip_filter()
    for first, last in _EVERY_ADDRESS:
        f.add_rule(first, last, BLOCKED)
    for ip in addresses:
        try:
            check(ip, allow_private, "metadata peer")
        except (AddressRefused, ValueError):
            continue
        f.add_rule(ip, ip, ALLOWED)
    return f


def magnet_params(info_hash: bytes, peers: list[tuple[str, int]], save_path: str):
    """``add_torrent_params`` of a magnet for the v1 ``info_hash`` with ``peers``, payload off (``FLAGS``)."""
    atp = lt.add_torrent_params()
    atp.info_hashes = lt.info_hash_t(lt.sha1_hash(info_hash))
    atp.save_path = save_path
    atp.flags = FLAGS
    atp.peers = peers
    return atp
