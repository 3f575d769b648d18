"""Building the crawler's libtorrent session: settings pack, bootstrap, IP filter.

Pure-ish helpers used by ``crawler.sources.dht.dht``; nothing here waits on
libtorrent. Bootstrap host names are resolved here (cooperatively, through
gevent's resolver) and each address is checked against the address policy
(contract §3) before libtorrent ever sees it.
"""

from __future__ import annotations

import ipaddress

import gevent.socket
import libtorrent as lt

from crawler import logs
from crawler.settings import Settings
from crawler.source_settings import listen_text
from crawler.sources.addresses import check

log = logs.get(__name__)

# libtorrent 2.1 overflows internally above ~429 KB/s and silently drops
# requests; Settings already bounds the variable, this guards constructors.
MAX_UPLOAD_RATE = 420_000
# Linux caps SO_RCVBUF at net.core.rmem_max (4 MiB on the test machine);
# libtorrent's default 0 keeps the kernel's ~208 KiB, which bursts of
# replies overflow.
SOCKET_BUFFER = 4 * 1024 * 1024
# Outgoing-query alerts arrive ~10-50 per lookup; 16+ lookups in flight need
# more than libtorrent's default queue of 2000 so none is dropped.
ALERT_QUEUE_SIZE = 50_000
# libtorrent blocks any address that sends more than dht_block_ratelimit
# packets a second (default 5), replies to our own queries included: a
# crawler running many lookups hears from the same close nodes far more often
# and would block them for dht_block_timeout (300 s). Raised for our own node
# only; remote nodes keep their limit, so queries to one node stay paced by
# the lookups in flight.
BLOCK_RATELIMIT = 100

# Ranges refused for DHT nodes unless private addresses are allowed, as
# ranges libtorrent's ip_filter takes: a superset of what
# crawler.sources.addresses refuses (tests/test_address_forms.py checks it).
_BLOCKED_V4 = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/3",
)
# IPv6: everything outside 2000::/3 (unallocated or special: loopback,
# IPv4-mapped, NAT64, ULA, link- and site-local, multicast), where Python's
# tables call it reserved. Inside 2000::/3: the IETF block 2001::/23 (Teredo
# included: its client IPv4 sits in the low 32 bits, under every server,
# flag and port value, so no set of ranges holds just the private ones, and
# Teredo relays are near-extinct), documentation, and the 6to4 ranges whose
# embedded IPv4 (bits 16-47) is in a blocked IPv4 range. Public NAT64 and
# Teredo addresses, which trackers may use, are blocked for the DHT.
_BLOCKED_V6 = ("::/3", "4000::/2", "8000::/1", "2001::/23", "2001:db8::/32", "3fff::/20")
_BLOCKED = _BLOCKED_V4 + _BLOCKED_V6 + tuple(
    str(ipaddress.IPv6Network(((0x2002 << 112) | (int(n.network_address) << 80), 16 + n.prefixlen)))
    for n in map(ipaddress.IPv4Network, _BLOCKED_V4)
)


def resolve_bootstrap(nodes: tuple[tuple[str, int], ...], allow_private: bool) -> list[tuple[str, int]]:
    """Resolve bootstrap ``(host, port)`` pairs to checked ``(ip, port)`` pairs.

    Every address of a name, IPv4 (A) and IPv6 (AAAA) alike, each checked
    by the address policy: the node of each family bootstraps from the
    routers of its own (``dht_listen.listening`` keeps those listened on).
    A name that does not resolve is logged and skipped (a worker without DNS
    still starts; its lookups then fail as "not bootstrapped"). Raises
    ``AddressRefused`` for an address the policy refuses.
    """
    out: list[tuple[str, int]] = []
    for host, port in nodes:
        try:
            infos = gevent.socket.getaddrinfo(host, port, 0, gevent.socket.SOCK_DGRAM)
        except OSError as e:
            log.warning("dht_bootstrap_unresolved", node=f"{host}:{port}", error=str(e))
            continue
        for _family, _, _, _, sockaddr in infos:
            assert isinstance(sockaddr[0], str)  # an IPv4 or IPv6 sockaddr: its address as text
            ip = str(ipaddress.ip_address(sockaddr[0].split("%")[0]))
            check(ip, allow_private, f"DHT bootstrap node {host}:{port}")
            if (ip, port) not in out:
                out.append((ip, port))
    return out


def ip_filter(allow_private: bool):
    """A ``libtorrent.ip_filter`` refusing non-public DHT nodes (or nothing)."""
    f = lt.ip_filter()
    if allow_private:
        return f
    for cidr in _BLOCKED:
        net = ipaddress.ip_network(cidr)
        f.add_rule(str(net[0]), str(net[-1]), 1)
    return f


def new_session(settings: Settings, bootstrap: list[tuple[str, int]], read_only: bool = True, extra: dict | None = None,
                listen: tuple[tuple[str, int], ...] | None = None):
    """The crawler's DHT-only ``libtorrent.session``, address filter applied.

    ``bootstrap``: checked ``(ip, port)`` pairs (``resolve_bootstrap``);
    ``listen``: the addresses to listen on (``dht_listen.listening``;
    default ``settings.dht_listen``); ``extra``: libtorrent settings
    overriding ours (tests, benchmarks). The benchmark's plain libtorrent
    loop builds its session here too, so both sides run the same node.
    """
    params = session_params(settings, bootstrap, read_only, listen)
    params.update(extra or {})
    # libtorrent's stubs want a settings_pack TypedDict, which lacks settings the binding knows
    # (handshake_client_version); the binding takes any dict of settings
    session = lt.session(params)  # type: ignore[call-overload]
    session.set_ip_filter(ip_filter(settings.allow_private))
    return session


def session_params(settings: Settings, bootstrap: list[tuple[str, int]], read_only: bool,
                   listen: tuple[tuple[str, int], ...] | None = None) -> dict:
    """The settings pack of the crawler's DHT-only session (``listen``: see ``new_session``)."""
    cat = lt.alert.category_t
    private = settings.allow_private
    return {
        # One DHT node per listen socket: the IPv4 and the IPv6 DHT (BEP 32).
        "listen_interfaces": listen_text(settings.dht_listen if listen is None else listen),
        "enable_dht": True,
        # DHT only: no local discovery, no port mapping on the crawler's LAN.
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        # IPv6 routers in brackets, as libtorrent reads them.
        "dht_bootstrap_nodes": listen_text(bootstrap),
        "dht_upload_rate_limit": max(1024, min(settings.dht_upload_rate_limit, MAX_UPLOAD_RATE)),
        "recv_socket_buffer_size": SOCKET_BUFFER,
        "send_socket_buffer_size": SOCKET_BUFFER,
        "alert_queue_size": ALERT_QUEUE_SIZE,
        "dht_block_ratelimit": BLOCK_RATELIMIT,
        "alert_mask": cat.dht_operation_notification | cat.dht_notification | cat.error_notification,
        # A read-only node (BEP 43) queries but is not put in others'
        # routing tables: the crawler stores no announces and answers no
        # queries, so it is never a peer source itself.
        "dht_read_only": read_only,
        # On loopback/private test networks every node shares one /24; the
        # public DHT keeps libtorrent's Sybil defences on.
        "dht_restrict_routing_ips": not private,
        "dht_restrict_search_ips": not private,
        "dht_ignore_dark_internet": not private,
    }
