"""What a crawl costs its sources: the requests each worker sends every tracker, by kind, and its DHT lookups.

Counted where each request is sent, by tracker URL and kind: ``connect`` (a
UDP connect), ``scrape`` (a UDP scrape datagram or an HTTP scrape request),
``announce`` and ``withdrawal`` (the ``stopped`` announce after each
answered announce). A UDP datagram sent again after a lost reply is one more
request (the tracker may have had both); an HTTP request is one, whatever
its redirects or connection attempts. Beside them ``dht``, the lookups that
started a traversal (``DhtSource``), and ``counted``, the (IP, torrent)
pairs the process's visits counted as new (contract §2's ``new``), so that
a cost can be read per pair found.

The UDP client knows an address, not a URL: ``name(url, targets)`` says
for which URL a tracker's addresses were just resolved, and a datagram is
counted for the URL that named its address last (an ``Lru``). Two URLs of
one tracker (``udp://t:1337`` and ``udp://t:1337/announce``) asked at the
same moment may swap a datagram or two; their sum is exact.

Batching. Counts add up in memory by (minute, URL, kind); the first count
after a write starts a timer, and ``every`` seconds later (``FLUSH_SECONDS``)
the batch goes to Redis in one script call (``request_counts.lua``, one
atomic step), into the hash of each minute it covers (``Keys.request_minute``),
which expires after ``KEPT_SECONDS``. A busy worker writes once per
``every`` seconds whatever its request rate; an idle one writes nothing.

Bounds. In each write the ``top`` trackers with the most requests in the
batch get fields of their own (``<kind>:<url>``); the others' requests are
summed in ``others:<kind>``, and the script gives no tracker a new field in
a hash that already holds ``MINUTE_FIELDS`` (its requests go to the others'
sum too). The totals per kind are always whole. So a minute's hash stays
bounded however many trackers the catalogue names and however many workers
write, and a busy tracker, which is in every worker's top, keeps its own
figure; the price is that a tracker too quiet to be in a batch's top counts
as ``others`` for that write.

Lost and doubled counts. These are figures, not the contract's §4 counters,
but they neither double nor vanish silently. Each batch carries (writer,
number) and the script adds a batch to a hash only once (the writer's
``mark:<writer>`` field holds its last number), so a batch sent again after a lost reply adds nothing twice; a batch
whose call failed is kept as it was and sent again before any newer count.
A process killed outright loses what it counted since its last write: at
most ``every`` seconds of its requests. A clean stop (``close``) writes what
is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

import gevent
import redis
from gevent.lock import BoundedSemaphore

from crawler import logs, spawning
from crawler.errors import StoreError
from crawler.keys import Keys
from crawler.observer import QUIET, Observer
from crawler.sources.lru import Lru
from crawler.store import scripts

log = logs.get(__name__)

# What a tracker is sent, in the order status shows it.
KINDS = ("connect", "scrape", "announce", "withdrawal")
# The DHT's lookups, its scrapes (BEP 33) and their queries, and the pairs counted new: the
# process's, never per tracker.
DHT, DHT_SCRAPES, DHT_SCRAPE_QUERIES, COUNTED = "dht", "dht_scrapes", "dht_scrape_queries", "counted"
# The prefix of the sum over every tracker without a field of its own, and of a writer's mark.
OTHERS, WRITER = "others:", "mark:"
# Seconds between a first count and the write that takes it (and at most what a killed process loses).
FLUSH_SECONDS = 5.0
# Fields a minute's hash holds before trackers stop getting fields of their own.
MINUTE_FIELDS = 256
# How long a minute's hash lives: status reads the last hour.
KEPT_SECONDS = 7200


class RequestCounts:
    """The requests one worker process sent its sources, batched into Redis (module note).

    ``top``: the trackers given fields of their own per write
    (``Settings.top_trackers``); ``cache_size``: addresses remembered with their
    URL (``Settings.tracker_cache_size``); ``every``: seconds between writes.
    ``observer`` is told ``sent(url, kind, n)`` of every request and
    ``sent(None, "dht", 1)`` of every lookup as it is counted.
    """

    def __init__(self, client: redis.Redis, keys: Keys, top: int, cache_size: int = 10_000,
                 observer: Observer = QUIET, every: float = FLUSH_SECONDS):
        self.keys, self.top, self.every = keys, top, every
        self.writer = os.urandom(8).hex()
        self.observer = observer
        self._names: Lru[tuple, str] = Lru(cache_size)
        self._pending: dict[tuple[int, str | None, str], int] = {}
        # (keys, args) of the batch last sent without an answer: sent again as it was
        self._unsent: tuple[list[str], list] | None = None
        self._number = 0
        self._writing = BoundedSemaphore(1)
        self._timer: gevent.Greenlet | None = None
        self._closed = False
        self._script = scripts.register(client, "request_counts", package="crawler.sources")

    # --- counting (the senders' side: no I/O) --------------------------------
    def sent(self, url: str, kind: str, n: int = 1) -> None:
        """``n`` requests of ``kind`` sent to the tracker at ``url``."""
        self._add(url, kind, n)
        self.observer.sent(url, kind, n)

    def name(self, url: str, targets: Iterable[tuple]) -> None:
        """The (family, address) pairs ``url`` was just resolved to: datagrams to them are ``url``'s."""
        for _, addr in targets:
            self._names[addr[:2]] = url

    def naming(self, udp_targets: Callable[[str], list]) -> Callable[[str], list]:
        """``udp_targets`` (a UDP tracker URL -> its (family, address) pairs), each answer ``name``d for its URL."""
        def named(url: str) -> list:
            targets = udp_targets(url)
            self.name(url, targets)
            return targets

        return named

    def sent_to(self, addr: tuple, kind: str) -> None:
        """A UDP datagram of ``kind`` sent to ``addr``: counted for the URL that named it last
        (``udp://host:port`` when none did)."""
        url = self._names.get(addr[:2])
        if url is None:
            host = f"[{addr[0]}]" if ":" in addr[0] else addr[0]
            url = f"udp://{host}:{addr[1]}"
        self.sent(url, kind)

    def lookup(self) -> None:
        """A DHT lookup that started a traversal."""
        self._add(None, DHT, 1)
        self.observer.sent(None, DHT, 1)

    def dht_scrape(self, queries: int) -> None:
        """A DHT scrape (BEP 33) that sent ``queries`` queries."""
        self._add(None, DHT_SCRAPES, 1)
        if queries:
            self._add(None, DHT_SCRAPE_QUERIES, queries)

    def visited(self, visit) -> None:
        """A finished visit (``Worker.on_visit``): its pairs counted new."""
        if visit.new:
            self._add(None, COUNTED, visit.new)

    def _add(self, url: str | None, kind: str, n: int) -> None:
        key = (int(time.time()) // 60, url, kind)
        self._pending[key] = self._pending.get(key, 0) + n
        if self._timer is None and not self._closed:
            self._timer = spawning.spawn_later(self.every, self._tick)

    # --- writing ---------------------------------------------------------------
    def _tick(self) -> None:
        self._timer = None  # a count made from now on starts the next timer
        try:
            self.flush()
        except StoreError as e:
            log.warning("request_counts_not_written", error=str(e), note="kept and sent again")
            if self._timer is None and not self._closed:
                self._timer = spawning.spawn_later(self.every, self._tick)

    def flush(self) -> None:
        """Write the batch left unanswered (if any), then what was counted since the last write.

        One script call each. Raises ``StoreError``; the batch is kept, to be sent again as it was.
        """
        with self._writing:
            if self._unsent is not None:
                self._send()
            if self._pending:
                pending, self._pending = self._pending, {}
                self._number += 1
                self._unsent = self.call(pending, self._number)
                self._send()

    def _send(self) -> None:
        assert self._unsent is not None  # called only with a batch to send
        keys, args = self._unsent
        try:
            self._script(keys=keys, args=args)
        except redis.RedisError as e:
            raise StoreError(f"writing the request counts: {e}") from e
        self._unsent = None

    def call(self, pending: dict[tuple[int, str | None, str], int], number: int) -> tuple[list[str], list]:
        """The script call (keys, args) adding ``pending`` ((minute, url or None, kind) -> n) as batch ``number``."""
        minutes: dict[int, dict[str | None, dict[str, int]]] = {}
        for (minute, url, kind), n in pending.items():
            per_kind = minutes.setdefault(minute, {}).setdefault(url, {})
            per_kind[kind] = per_kind.get(kind, 0) + n
        keys: list[str] = []
        args: list = [WRITER + self.writer, number, KEPT_SECONDS, MINUTE_FIELDS]
        for minute, urls in sorted(minutes.items()):
            keys.append(self.keys.request_minute(minute))
            fields = minute_fields(urls, self.top)
            args.append(len(fields))
            for triple in fields:
                args.extend(triple)
        return keys, args

    def close(self) -> None:
        """Write what is left (a clean stop). A Redis that does not take it is logged (those counts are
        lost), never raised."""
        self._closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.kill(block=False)  # not started yet: a started tick clears the attribute first
        try:
            self.flush()
        except StoreError as e:
            log.warning("request_counts_lost", error=str(e))


def minute_fields(urls: dict[str | None, dict[str, int]], top: int) -> list[tuple[str, int, str]]:
    """The (field, increment, fallback) triples of one minute of a batch: ``urls`` maps a tracker URL
    (None: the process's own figures, ``dht`` and ``counted``) to its counts by kind."""
    totals: dict[str, int] = {}
    others: dict[str, int] = {}
    for counts in urls.values():
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    ranked = sorted((u for u in urls if u is not None), key=lambda u: (-sum(urls[u].values()), u))
    fields = [(kind, n, "") for kind, n in sorted(totals.items())]
    for i, url in enumerate(ranked):
        for kind, n in sorted(urls[url].items()):
            if i < top:
                fields.append((f"{kind}:{url}", n, OTHERS + kind))
            else:
                others[kind] = others.get(kind, 0) + n
    fields += [(OTHERS + kind, n, "") for kind, n in sorted(others.items())]
    return fields


class Tally:
    """Minutes of request counts summed: ``totals`` (kind -> n, ``dht`` and ``counted`` included),
    ``trackers`` (URL -> kind -> n, the trackers with fields of their own) and ``others`` (kind -> n)."""

    def __init__(self, minutes: Iterable[dict[str, int]] = ()):
        self.totals: dict[str, int] = {}
        self.trackers: dict[str, dict[str, int]] = {}
        self.others: dict[str, int] = {}
        for fields in minutes:
            for field, n in fields.items():
                if field.startswith(WRITER):
                    continue
                if field.startswith(OTHERS):
                    kind = field[len(OTHERS):]
                    self.others[kind] = self.others.get(kind, 0) + n
                elif ":" in field:
                    kind, _, url = field.partition(":")
                    per_kind = self.trackers.setdefault(url, {})
                    per_kind[kind] = per_kind.get(kind, 0) + n
                else:
                    self.totals[field] = self.totals.get(field, 0) + n

    @property
    def requests(self) -> int:
        """Tracker requests of every kind (not the DHT's lookups)."""
        return sum(self.totals.get(k, 0) for k in KINDS)
