"""The sources' settings (contract §3): trackers, the DHT, discovery, metadata fetches, and the tracker defaults.

``SourceSettings`` holds their declarations (``envparse.setting``) and is one
of ``crawler.settings.Settings``'s bases; each setting is declared once, here
or there, and ``Settings.from_env`` reads them all.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from crawler import envparse as p
from crawler import redact
from crawler.envparse import DAY

# A short list of long-lived public trackers; a torrent's own trackers (magnet
# tr=, .torrent announce-list) are always used besides these.
DEFAULT_TRACKERS = (
    "udp://tracker.opentrackr.org:1337/announce",
    "udp://open.stealth.si:80/announce",
    "udp://tracker.torrent.eu.org:451/announce",
    "udp://exodus.desync.com:6969/announce",
)

# The Mainline DHT's public bootstrap routers.
DEFAULT_DHT_BOOTSTRAP = (
    ("router.bittorrent.com", 6881),
    ("dht.transmissionbt.com", 6881),
    ("router.utorrent.com", 6881),
    ("dht.libtorrent.org", 25401),
)

# Most trackers cap numwant at 200 (opentracker's default too).
TRACKER_MAX_PEERS = 200
# Requests per second every worker of a namespace together sends each default
# tracker (its RATE): what one busy seedbox sends, a client announcing ~18,000
# torrents at the usual 30-minute interval. These are volunteer-run public
# services that every crawl on the defaults shares; docs/sources.md, "Default
# rates", says why this figure and how a plan meets it.
DEFAULT_TRACKER_RATE = 10.0


@dataclass(frozen=True)
class TrackerSpec:
    """A tracker URL, the most peers it hands out per announce and the most requests per
    second every worker of the namespace together may send it (None: no cap of its own)."""

    url: str
    max_peers: int
    rate: float | None = None

    def __repr__(self) -> str:
        # A private tracker's URL holds a passkey: a repr lands in tracebacks and logs.
        return f"TrackerSpec(url={redact.url(self.url)!r}, max_peers={self.max_peers}, rate={self.rate})"


def _default_trackers(max_peers: int) -> tuple[TrackerSpec, ...]:
    return tuple(TrackerSpec(u, max_peers, DEFAULT_TRACKER_RATE) for u in DEFAULT_TRACKERS)


def _trackers(v: str, default_max: int) -> tuple[TrackerSpec, ...]:
    return tuple(TrackerSpec(url, n, r) for url, n, r in p.trackers(v, default_max))


def listen_text(addresses) -> str:
    """``(ip, port)`` pairs as ``PEERCRAWL_DHT_LISTEN`` and libtorrent's ``listen_interfaces`` write them:
    ``ip:port,...``, IPv6 in brackets."""
    return ",".join(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip, port in addresses)


def _listen_addresses(v: str) -> tuple[tuple[str, int], ...]:
    """Comma-separated ``ip:port`` entries, each IP once; an error names the entry."""
    out: list[tuple[str, int]] = []
    for part in (x.strip() for x in v.split(",") if x.strip()):
        try:
            ip, port = p.listen(part)
        except ValueError as e:
            raise ValueError(f"entry {part!r}: {e}") from None
        ip = str(ipaddress.ip_address(ip))
        if any(ip == seen for seen, _ in out):
            raise ValueError(f"entry {part!r}: {ip} is listed twice")
        out.append((ip, port))
    if not out:
        raise ValueError("expected ip:port,...")
    return tuple(out)


@dataclass(frozen=True)
class SourceSettings:
    """The settings of how a visit asks trackers and the DHT for peers; part of ``Settings``."""

    default_tracker_max_peers: int = p.setting(
        "PEERCRAWL_TRACKER_MAX_PEERS", TRACKER_MAX_PEERS, p.positive_int, "max peers of a tracker without `|MAX`")
    # Announced to besides each torrent's own trackers.
    trackers: tuple[TrackerSpec, ...] = p.setting(
        "PEERCRAWL_TRACKERS", _default_trackers(TRACKER_MAX_PEERS), _trackers,
        "default trackers, `URL`, `URL|MAXPEERS` or `URL|MAXPEERS|RATE` (RATE: most requests per second to it "
        "from every worker together; MAXPEERS may be empty), comma-separated; set but empty: none",
        shown="four public trackers, each at RATE 10", empty_is_value=True, uses="default_tracker_max_peers",
        derive=_default_trackers)
    # None: no cap. Politeness to trackers already comes from each tracker's
    # min interval and the revisit interval; a cap is for operators who must
    # promise a figure (docs/sources.md, "The announce cap").
    max_announces_per_second: float | None = p.setting(
        "PEERCRAWL_MAX_ANNOUNCES_PER_SECOND", None, p.announce_rate,
        "most tracker requests per second (announces and their withdrawals) from every worker of the namespace "
        "together, spaced evenly (0.001–100000); visits wait for it", shown="unset: no cap")
    dht: bool = p.setting("PEERCRAWL_DHT", True, p.on_off, "`on` / `off`")
    dht_bootstrap: tuple[tuple[str, int], ...] = p.setting(
        "PEERCRAWL_DHT_BOOTSTRAP", DEFAULT_DHT_BOOTSTRAP, p.host_ports,
        "`host:port,...`; every IPv4 and IPv6 address of a name is used, by the node of its family",
        shown="the public routers", empty_is_value=True)
    # Every address of both families (BEP 32: the IPv6 DHT is a network of
    # its own), ports the system picks: several workers share a machine. An
    # IPv6 address the machine cannot use is left out at start with a warning
    # (crawler/sources/dht_listen.py).
    dht_listen: tuple[tuple[str, int], ...] = p.setting(
        "PEERCRAWL_DHT_LISTEN", (("0.0.0.0", 0), ("::", 0)), _listen_addresses,
        "`ip:port,...` the worker's DHT node listens on (IPv6 in brackets); without IPv6 on the machine the "
        "node runs on IPv4 alone, with one warning", shown="`0.0.0.0:0,[::]:0`")
    # Off: a crawl tracks what it was given. On, each worker's DHT node asks
    # other nodes for samples of the info-hashes they store (BEP 51) and adds
    # the new ones to the discovered lane (crawler/sources/dht/discovery.py).
    discovery: bool = p.setting(
        "PEERCRAWL_DISCOVERY", False, p.on_off, "`on` / `off`: BEP 51 sampling into the `discovered` lane "
        "(needs `PEERCRAWL_DHT=on`)")
    # One sample query a second per worker: each answer carries up to 20
    # hashes (libtorrent's default), so ~70,000 an hour, while a node is asked
    # again only after the interval it gives (libtorrent's: 6 hours).
    discovery_rate: float = p.setting(
        "PEERCRAWL_DISCOVERY_RATE", 1.0, p.bounded_float(0.001, 1000.0),
        "BEP 51 sample queries per second of each worker, 0.001–1000 (each node asked at most once per its own "
        "interval)")
    # Most of a real catalogue has nobody on the DHT; a lookup is dozens of
    # queries to other people's nodes (crawler/sources/dht/dht_schedule.py).
    dht_empty_visits: int = p.setting(
        "PEERCRAWL_DHT_EMPTY_VISITS", 3, p.bounded_int(0, 1000),
        "DHT lookups in a row that found nobody before a torrent's lookups are spaced out on a widening "
        "schedule (0: look up every visit)")
    # None: no budget; the per-node pacing still holds (docs/dht.md).
    max_dht_lookups_per_second: float | None = p.setting(
        "PEERCRAWL_MAX_DHT_LOOKUPS_PER_SECOND", None, p.announce_rate,
        "most DHT lookups per second from every worker of the namespace together, spaced evenly "
        "(0.001–100000); visits wait for it", shown="unset: no budget")
    # A get_peers lookup rarely gathers more than ~100 distinct peers quickly.
    dht_max_peers: int = p.setting("PEERCRAWL_DHT_MAX_PEERS", 100, p.positive_int, "the DHT's \"max\" for scoring")
    # libtorrent's default (a few KB/s) caps a crawler's lookup rate; above
    # ~429 KB/s libtorrent 2.1 overflows internally and drops requests.
    dht_upload_rate_limit: int = p.setting(
        "PEERCRAWL_DHT_UPLOAD_RATE_LIMIT", 200_000, p.bounded_int(1024, 420_000),
        "bytes/s (libtorrent's default caps a crawler; above ~429 KB/s libtorrent 2.1 drops requests)")
    # 16 lookups at a time lost nothing on loopback; 64 overflowed the socket.
    dht_lookups_in_flight: int = p.setting(
        "PEERCRAWL_DHT_LOOKUPS_IN_FLIGHT", 16, p.bounded_int(1, 256), "DHT lookups at a time")
    # A lookup gathers replies until enough peers or this deadline.
    dht_timeout: float = p.setting("PEERCRAWL_DHT_TIMEOUT", 20.0, p.positive_float, "deadline of one DHT lookup (s)")
    # BEP 33: a torrent no tracker gives counts for, whose DHT lookup found
    # peers, has its DHT swarm's size estimated from the nearest nodes' bloom
    # filters (crawler/sources/dht/dht_sizes.py).
    dht_scrape: bool = p.setting(
        "PEERCRAWL_DHT_SCRAPE", True, p.on_off, "`on` / `off`: estimate the size of swarms only the DHT reports "
        "(BEP 33 scrapes of the nodes nearest the torrent)")
    dht_scrape_timeout: float = p.setting(
        "PEERCRAWL_DHT_SCRAPE_TIMEOUT", 5.0, p.positive_float, "deadline of one DHT scrape (s)")
    # ...or until this long passes with no new reply (libtorrent sends no
    # "lookup finished" alert for get_peers; a dead node would otherwise cost
    # every lookup the full deadline).
    dht_settle: float = p.setting(
        "PEERCRAWL_DHT_SETTLE_SECONDS", 2.0, p.positive_float, "a DHT lookup also ends after this long without a "
        "new reply (s)")
    # Queries per second from this process to any one remote DHT address,
    # counted over dht_node_window seconds. libtorrent ignores an address for
    # 5 minutes once it sent 5/s (50 packets within 10 s); 4/s leaves room for
    # the routing-table pings we cannot see (docs/dht.md).
    dht_node_rate: float = p.setting(
        "PEERCRAWL_DHT_NODE_RATE", 4.0, p.positive_float,
        "most queries per second this process sends any one DHT node; libtorrent nodes ban above 5/s "
        "(docs/dht.md). Per process: N workers behind one address share it, so use 4/N")
    # libtorrent counts over 10 s windows; at most rate x window queries go
    # to one address in any such window.
    dht_node_window: float = p.setting(
        "PEERCRAWL_DHT_NODE_WINDOW", 10.0, p.positive_float, "the window (s) `PEERCRAWL_DHT_NODE_RATE` is counted over")
    # One UDP try; BEP 15 starts at 15 s, a crawler gives up sooner. Also
    # bounds the best-effort "stopped" announce after each answer (UDP or HTTP).
    udp_timeout: float = p.setting(
        "PEERCRAWL_UDP_TIMEOUT", 4.0, p.positive_float,
        "one UDP tracker try; also the most a tracker's \"stopped\" announce may take", shown="4 s")
    # Tries per UDP request (connect or announce) before the tracker failed:
    # one lost datagram should not fail a tracker.
    udp_retries: int = p.setting("PEERCRAWL_UDP_RETRIES", 2, p.bounded_int(1, 10), "tries per UDP tracker request")
    # One HTTP exchange, redirects included (TCP and TLS setup take longer than
    # one UDP try); within the visit deadline a slow tracker is given up.
    http_timeout: float = p.setting(
        "PEERCRAWL_HTTP_TIMEOUT", 10.0, p.positive_float, "one HTTP tracker exchange, redirects included",
        shown="10 s")
    # Tracker replies of 200 peers are a few KiB; 2 MiB is generous.
    http_max_bytes: int = p.setting(
        "PEERCRAWL_HTTP_MAX_BYTES", 2 * 1024 * 1024, p.positive_int, "largest HTTP tracker reply read",
        shown="2 MiB")
    # Extra CA certificates (PEM) trusted for https trackers on top of the
    # default trust store; None: the default store alone, as browsers do.
    tracker_ca_file: Path | None = p.setting(
        "PEERCRAWL_TRACKER_CA_FILE", None, p.existing_file,
        "PEM file of extra CA certificates trusted for https trackers (added to the system's store)", shown="none")
    # The port announced to trackers; every entry on it in replies is the
    # crawler's (SelfFilter). 0: one random high port per namespace, chosen by
    # the first worker and shared by all through Redis.
    announce_port: int = p.setting(
        "PEERCRAWL_ANNOUNCE_PORT", 0, p.bounded_int(0, 65535),
        "port announced to trackers: every entry on it is dropped as the crawler's own, so never a port clients "
        "use (6881); 0: one random port per namespace, stored in Redis and shared by every worker")
    # Scrape first: a tracker that reports a torrent's swarm empty is not
    # announced to (docs/sources.md, "Scrape first").
    scrape_first: bool = p.setting(
        "PEERCRAWL_SCRAPE", True, p.on_off, "`on` / `off`: scrape each tracker first and announce only where "
        "its swarm is not empty")
    # Scrape ahead: torrents due within this many seconds are scraped per tracker
    # in full packets before their visits, and a visit takes counts up to this
    # old (docs/sources.md, "Scrape ahead"); at most half the revisit interval.
    scrape_ahead_seconds: float = p.setting(
        "PEERCRAWL_SCRAPE_AHEAD_SECONDS", 30.0, p.nonnegative_float, "how far ahead of their visits torrents are "
        "scraped (and how old counts a visit takes), at most half the revisit interval; 0: each visit scrapes")
    # A tracker's UDP and HTTP URLs (one host, port and path) share one swarm store
    # (docs/sources.md, "One tracker, one ask"); off for a host that runs two.
    one_ask_per_tracker: bool = p.setting(
        "PEERCRAWL_ONE_ASK_PER_TRACKER", True, p.on_off, "`on` / `off`: ask the URLs of one tracker (one host, port "
        "and path) once per visit")
    # Two trackers learned to list the same peers are announced to once while their scrapes
    # agree (docs/sources.md, "Mirrors"); off asks every tracker a torrent names.
    ask_mirrors_once: bool = p.setting(
        "PEERCRAWL_ASK_MIRRORS_ONCE", True, p.on_off, "`on` / `off`: announce once to two trackers learned to "
        "list the same peers, while their scrapes of a torrent agree")
    # Off: a crawl of the public swarm has no business with private addresses
    # (a hostile tracker or node could aim the crawler at the local network).
    allow_private: bool = p.setting(
        "PEERCRAWL_ALLOW_PRIVATE", False, p.on_off, "allow loopback/private trackers, DHT nodes and metadata peers")
    # Tracker backoff after consecutive failures: base doubles up to max.
    tracker_backoff_base: float = p.setting(
        "PEERCRAWL_TRACKER_BACKOFF_SECONDS", 60.0, p.positive_float, "first backoff of a failing tracker (s); "
        "doubles with each failure")
    tracker_backoff_max: float = p.setting(
        "PEERCRAWL_TRACKER_BACKOFF_MAX_SECONDS", 6 * 3600.0, p.positive_float, "longest backoff of a tracker (s)")
    # Consecutive failures before a tracker backs off: one lost UDP exchange
    # is common, two in a row usually mean the tracker is down.
    tracker_backoff_after: int = p.setting(
        "PEERCRAWL_TRACKER_BACKOFF_AFTER", 2, p.bounded_int(1, 100), "failures in a row before a tracker backs off")
    # Seconds a tracker is left alone for a torrent when its reply gave no
    # min interval (UDP replies never do); the revisit interval spaces
    # announces anyway.
    tracker_floor: float = p.setting(
        "PEERCRAWL_TRACKER_FLOOR_SECONDS", 0.0, p.nonnegative_float,
        "least time between two announces of a torrent to one tracker when it gave no `min interval`")
    # Peers kept per source and reply: this many times that source's max. We
    # ask for max + 1, so a tracker that honours numwant never reaches 2x;
    # past it a reply is padding or an attack (a 2 MiB reply holds 349,504
    # IPv4 entries), and the rest is cut and counted per tracker in status.
    source_peers_factor: int = p.setting(
        "PEERCRAWL_SOURCE_PEERS_FACTOR", 2, p.bounded_int(1, 1000),
        "peers kept from one reply of a source: this many times its max; the rest is cut and counted per tracker "
        "(`peers_cut` in `status --json`)")
    # Entries of each per-process cache keyed by tracker URL, host or address
    # (DNS, the address that answered, UDP connection ids, tracker health):
    # far above the trackers a crawl uses at once, small in memory (~1 KB each).
    tracker_cache_size: int = p.setting(
        "PEERCRAWL_TRACKER_CACHE_SIZE", 10_000, p.bounded_int(16, 10_000_000),
        "entries of each per-process cache keyed by tracker URL, host or address (DNS, answered address, UDP "
        "connection ids, tracker health), least recently used dropped")
    # Tracker health of a tracker not used for this long is removed from
    # Redis: a tracker any torrent still names is announced at least once per
    # revisit interval or backoff (at most 6 h by default), so a week unused
    # means no torrent names it any more. Must exceed both.
    tracker_prune_seconds: float = p.setting(
        "PEERCRAWL_TRACKER_PRUNE_SECONDS", 7 * DAY, p.positive_float,
        "a tracker's health (answers, failures, refusals, learned cap) is removed from Redis once unused this "
        "long and named by no torrent that is not evicted; must exceed the backoff max and the revisit interval",
        shown="7 days")
    # Trackers shown one by one, busiest first, in status, the operators page
    # and /metrics (the rest summed as "other"), and labelled by URL in a
    # worker's /metrics besides the defaults: twenty fill a terminal's table
    # and keep /metrics at ~200 tracker series whatever the catalogue names.
    top_trackers: int = p.setting(
        "PEERCRAWL_TOP_TRACKERS", 20, p.bounded_int(1, 1000),
        "trackers shown one by one (busiest first) in `status`, the operators page and `/metrics`, the rest "
        "summed as `other`; also how many trackers besides the defaults a worker's `/metrics` labels by URL")
    # Off: the rest of the crawler never connects to a peer; fetching a
    # torrent's info dictionary does (docs/metadata.md says what a peer
    # then learns of the crawler).
    metadata: bool = p.setting(
        "PEERCRAWL_METADATA", False, p.on_off, "`on` / `off`: fetch the info dictionary (name, size, files) of "
        "torrents with peers and no name from those peers (BEP 9; connects to peers, docs/metadata.md)")
    # Each fetch holds one torrent in the fetcher's session and connects up
    # to 30 of its peers: 8 keep a worker's session at 256 connections at most.
    metadata_in_flight: int = p.setting(
        "PEERCRAWL_METADATA_IN_FLIGHT", 8, p.bounded_int(1, 256), "metadata fetches at a time, per worker process")
    # A peer that has the metadata sends it within seconds of connecting;
    # the rest is connection set-up to peers that may be gone (libtorrent
    # gives a connection 15 s).
    metadata_timeout: float = p.setting(
        "PEERCRAWL_METADATA_TIMEOUT", 20.0, p.bounded_float(0.5, 600.0),
        "deadline of one metadata fetch (s, 0.5–600), a wait for a free slot included")
    # Connections only go out, but outgoing uTP leaves from the listen
    # socket's UDP port; ports the system picks, so workers share a machine.
    metadata_listen: tuple[tuple[str, int], ...] = p.setting(
        "PEERCRAWL_METADATA_LISTEN", (("0.0.0.0", 0), ("::", 0)), _listen_addresses,
        "`ip:port,...` the metadata fetcher's sockets bind to (IPv6 in brackets); incoming connections are "
        "refused", shown="`0.0.0.0:0,[::]:0`")
    # Every fetch connects to up to 30 of a swarm's peers: the namespace's
    # workers together start at most this many a second.
    max_metadata_fetches_per_second: float = p.setting(
        "PEERCRAWL_MAX_METADATA_FETCHES_PER_SECOND", 2.0, p.announce_rate,
        "most metadata fetches started per second by every worker of the namespace together, spaced evenly "
        "(0.001–100000)")

    def source_peers_bound(self, max_peers: int) -> int:
        """The most peers kept from one reply of a source whose max is ``max_peers``."""
        return self.source_peers_factor * max(1, max_peers)

    def tracker_rates(self) -> dict[str, float]:
        """Tracker URL -> its requests per second, for the trackers with a cap (``URL|MAX|RATE``)."""
        return {t.url: t.rate for t in self.trackers if t.rate}

    def tracker_max_peers(self, url: str) -> int:
        """The configured max peers of ``url``, else the default."""
        for t in self.trackers:
            if t.url == url:
                return t.max_peers
        return self.default_tracker_max_peers
