"""Recording one visit's peers into the unique-IP counters (contract §4, §6).

Strategy: Python does the cheap, stateless part (normalise IPs, geolocate, derive the §4 metrics,
fingerprint every (metric, IP) pair, group the keys). A probe (``probe.lua``, one round trip) finds
the IPs whose group record is fresh: nothing of theirs can count, so a revisit of known peers ends
there, and one of the very peers at the very places of a visit before it at their swarm record
(``swarm_record``: one bucket read). A visit the caller knows the probe would find nothing for (the
worker: a torrent with no source notes, never visited) skips it. For the others, one Lua call
(``record.lua``) per batch does the whole check-mark-increment atomically for up to ``batch_pairs``
pairs: marks for new pairs, the batch's total per (metric, index), and the StatHat outbox increment.
A batch never splits an IP's metrics. A visit's batches go out in one pipeline: a visit of 1,000 new
peers (~6,000 pairs, three batches) costs one round trip after the probe, while each call holds
Redis for a bounded time (other clients' commands run between them). A crash between batches leaves
every finished batch counted and the rest not: a retry counts exactly the rest (its pairs' marks are
already there).

Shards (contract §9): with several counter shards a torrent's metrics live whole in the torrent's
shard and only the place metrics are split by IP; the probe and record calls above then go to the
torrent's shard, after the place calls of the IPs' own shards (``place_shards.PlaceShards``, whose
module note tells how and why). With one shard, shard 0 is the home and one record.lua call does
both parts; an IP whose place marks the process knows are fresh (``fresh_places``: it met the IP in
another swarm) goes in it as a torrent part carrying their time, its place marks neither read nor
written, and the call answers the place mark times of the other IPs.

Several visits at once (``record_visits``, the worker's ``Batcher``): each distinct IP text is
parsed, located and fingerprinted once while the process keeps it (``met_ips``), every visit's
probes share one round trip and every record call the next (with several shards, the place calls of
the whole batch come first, one per shard). A record call holds the IPs of several visits of one
shard (``script_args.RecordBatches``: fourteen first visits of 50 peers fill one), which it takes one
after the other, so the visits count as if recorded one after the other while sharing the call's
fixed cost and the indexes they have in common; an IP met at two places in one batch goes in two
place calls.

The calls' arguments are built in ``script_args`` (a shard's keys: ``shard_keys``), each IP packed
into them by ``packing`` (a place's part in ``places``); ``geo_errors`` publishes the locator's errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence

import redis

from crawler.counters.fingerprint_key import load_secret
from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.geo_errors import GeoErrorTally
from crawler.counters.mark_sweep import MarkSweep
from crawler.counters.marks import Fingerprinter, mark_time
from crawler.counters.met_ips import Met, MetIPs
from crawler.counters.names import info_hash_hex, month_of
from crawler.counters.packing import add_visit, visit_part
from crawler.counters.place_shards import PlaceShards
from crawler.counters.places import PlaceInfo
from crawler.counters.processed import Processed
from crawler.counters.record_replies import COUNTED, read_reply
from crawler.counters.rollup import Rollup
from crawler.counters.script_args import RecordBatch, RecordBatches, VisitPart
from crawler.counters.shard_keys import ShardKeys, bucket_keys
from crawler.counters.swarm_record import SETTLED, Swarms, check_calls, probe_arg, settled_of, swarms_in
from crawler.errors import StoreError
from crawler.keys import Keys, shard_of
from crawler.shard_layout import buckets_per_shard
from crawler.store.replica_wait import Wait
from crawler.store.scripts import register
from crawler.store.store import Store
from geo.locator import Place

# Pairs of one record.lua call: ~4,800 (fourteen first visits of 50 peers) hold Redis ~6 ms;
# calls of several visits share their fixed cost and indexes (a quarter of a call of seven), so
# larger calls cost less Redis CPU per visit (bench/bench_record_lua.py, replayed: 4,800 pairs
# 0.75-0.92 of 2,400's script time a visit).
DEFAULT_BATCH_PAIRS = 4800
# IPs one probe.lua call looks up (its MGET has at most as many keys).
PROBE_IPS = 2000
# Times a recording is sent with the widths record.lua asked for (``_record_met``): once is enough
# unless the torrent's marks move to yet another width meanwhile (another visit of it at once).
WIDTH_TRIES = 4


class Recorder:
    """Records visits' peers into the §4 counters.

    ``client``: a redis-py client; ``keys``: the namespace's home ``Keys``
    (its ``all_counter_shards`` are the counter shards, its ``mark_buckets`` the
    crawl's dedupe mark buckets, split evenly among them);
    ``settings``: uses ``secret``, ``redis_url`` and ``data_dir`` (the key,
    ``fingerprint_key.load_secret``: may raise ``SettingsError``), ``dedupe_seconds``,
    ``stathat_ezkey`` and ``stathat_families``. ``locator``: a ``geo.Locator`` (default: one built
    from ``settings``, which may raise ``GeoError``). ``mark_buckets``: another count than
    the keys' (benchmarks and tests); ``batch_pairs``: see the module note.
    """

    def __init__(
        self,
        client: redis.Redis | Store,
        keys: Keys,
        settings,
        locator=None,
        *,
        mark_buckets: int | None = None,
        batch_pairs: int = DEFAULT_BATCH_PAIRS,
    ):
        if locator is None:
            from geo import Locator

            locator = Locator(settings)
        self.store = Store.of(client)  # a worker's: its script calls share round trips
        client = self.client = self.store.client
        self.keys, self.settings, self.locator = keys, settings, locator
        self.batch_pairs = max(8, batch_pairs)
        self.window = math.ceil(settings.dedupe_seconds)
        try:
            secret = load_secret(client, keys, settings)
        except redis.RedisError as e:
            raise StoreError(f"cannot read the fingerprint secret: {e}") from e
        shards = keys.all_counter_shards
        # each shard's part of the crawl's mark buckets (or of the total a test or a bench gives)
        self.fingerprints = Fingerprinter(secret, buckets_per_shard(mark_buckets or keys.mark_buckets, len(shards)))
        # a crawl made before rosters held marks by (IP, torrent): they are looked for there too
        self._legacy = not keys.rosters
        # a peer met again (another swarm, a revisit) is neither parsed, located nor fingerprinted again
        self.met_ips = MetIPs(locator, self.fingerprints)
        posting = settings.stathat_ezkey is not None
        families = set(settings.stathat_families)
        self._post_countries = posting and "countries" in families
        self._post_torrents = posting and "torrents" in families
        self._shards = [ShardKeys(k) for k in shards]
        self.rollup = Rollup(self.store, keys) if len(shards) > 1 else None
        self._record = register(client, "record", package=__package__)
        self._probe_script = register(client, "probe", package=__package__)
        self._check_script = register(client, "swarm_check", package=__package__)
        self._places: dict = {}
        self._post = ("c" if self._post_countries else "-") + ("t" if self._post_torrents else "-")
        self._geo_errors = GeoErrorTally(client, keys, locator)
        # PEERCRAWL_WAIT_REPLICAS: each recording returns once that many replicas have it (docs/redis.md)
        self._wait = Wait.from_settings(settings)
        # torrents.processed (None: StatHat does not post it): a batch notes its visits at once (``batcher``)
        self.processed = (Processed(self.store, keys, self._wait)
                          if posting and "torrents.processed" in families else None)
        # the place marks this process knows are fresh (a crawl of one shard; PlaceShards keeps its own)
        self.fresh_places = FreshPlaces()
        # how a visit's swarm record is keyed, and the visits they settled (the worker's log, the benches)
        self.swarms = Swarms(self.fingerprints, locator)
        # expired marks removed, ``budget`` buckets a call (``mark_sweep``)
        self.sweep = MarkSweep(client, keys, self._shards, self.fingerprints.buckets, self.window, self.rollup).sweep
        # torrent and place metrics in different shards (module note)
        self._place_shards = PlaceShards(
            self.store, self._shards, post_countries=self._post_countries, wait=self._wait, window=self.window,
            batch_pairs=self.batch_pairs, buckets=self.fingerprints.buckets) if len(shards) > 1 else None

    # --- recording --------------------------------------------------------
    def record_visit(self, info_hash: str, ips: Iterable[str], now: float, probe: bool = True,
                     processed: bool = False) -> int:
        """Record ``ips`` (text form, or ``ip_forms.PackedIPs``) seen on ``info_hash`` at unix time ``now``.

        Returns how many IPs were new for ``torrents.<info-hash>.users`` (the
        ``new`` of §2). Strings that are not IPs are ignored. ``probe`` False:
        no probe.lua first, every IP goes to record.lua (a torrent whose
        group records the probe would not find: one never visited); the
        count is the same either way. ``processed``: the visit is then noted
        for ``torrents.processed`` (``visited``). Raises ``ValueError`` for a bad
        info-hash, ``StoreError`` if Redis fails (batches already done stay
        counted; recording again is safe).
        """
        new = self.record_visits([(info_hash, ips)], now, [probe])[0]
        if processed:
            self.visited(info_hash, now)
        return new

    def record_visits(self, visits: Sequence[tuple[str, Iterable[str]]], now: float,
                      probes: Sequence[bool] | None = None) -> list[int]:
        """``record_visit`` of several visits (distinct torrents) at one time ``now``, together
        (``probes``: each visit's ``probe``, default all True).

        Each distinct IP text is parsed, located and fingerprinted once while
        the process keeps it (``met_ips``); the visits' probes share one round trip and their recordings the next (module
        note). Their swarm records are keyed by their IPs alone (``swarm_record.swarm_of_ips``): asked for
        first, those they settle are not met at all. Returns each visit's ``new``.
        """
        given: list[tuple[str, Collection[str]]] = [
            (h, ips if isinstance(ips, Collection) else list(ips)) for h, ips in visits]
        first = self.swarms.lookups.first()
        asked = self.swarms.of_texts(given, probes) if first else []
        settled = self._settled(mark_time(now), asked)
        errors, met = self.locator.read_errors, self.met_ips.visit
        met_visits = [(h, [] if i in settled else met(ips)) for i, (h, ips) in enumerate(given)]
        # a record asked for is the one its met IPs key (the same distinct addresses): not keyed again
        keyed = {i: swarm for i, _, swarm in asked}

        def key(i: int, t_fp: int, ips: list[Met]) -> tuple[int, bytes]:
            return keyed.get(i) or self.swarms.of_ips(t_fp, ips)

        # an IP read in error has no place to vouch for: such a batch writes no swarm record
        return self._record_met(met_visits, now, probes, first, asked=True,
                                key=key if self.locator.read_errors == errors else None)

    def record_places_many(self, visits: Sequence[tuple[str, Iterable[tuple[bytes, Place]]]],
                           now: float, probes: Sequence[bool] | None = None) -> list[int]:
        """``record_visits`` with IPs already packed and located: each visit an info-hash and its
        ``(packed_ip, Place)`` pairs, the visits of distinct torrents, all at time ``now``.

        An IP given twice in one visit counts once (its first place is kept): two records of one IP
        in one record.lua call would each miss the other's new marks. The visits' probe calls share
        a round trip, their record calls the next (with several shards, the place calls first, an
        IP and place met in two visits sent once). A record call takes its visits one after the
        other in one atomic step, so they count as if recorded one by one (never two visits of one
        torrent in a call). A visit whose ``probes`` entry is False skips the probe. Returns each
        visit's ``new`` (contract §2), summed over the counter shards; raises ``ValueError`` for a
        bad info-hash or time before anything is sent.
        """
        met = self.met_ips.located
        return self._record_met([(h, met(located)) for h, located in visits], now, probes,
                                self.swarms.lookups.first(), key=lambda _, t_fp, ips: self.swarms.of_places(t_fp, ips))

    def _record_met(self, visits: Sequence[tuple[str, list[Met]]], now: float, probes: Sequence[bool] | None,
                    first: bool, asked: bool = False, key: Callable | None = None) -> list[int]:
        """``record_places_many`` of visits whose distinct IPs are already met (``met_ips``); ``first``:
        the batch's ``Lookups.first`` (taken once a batch: other batches move it), ``asked``: the swarm
        records were asked for already; ``key(position, t_fp, ips)``: a visit's swarm record (None: none)."""
        now_i = mark_time(now)
        parts = self._parts(visits, now_i, probes, first and not asked, key)
        # the locator's errors, and names left out of places (``_place_info``)
        self._geo_errors.publish(now)
        out = [0] * len(visits)
        if not parts:
            return out
        probed_parts = [part for _, _, part, probed in parts if probed]
        answers = iter(self._probe_many(now_i, probed_parts, first) if probed_parts else [])
        flags = [next(answers) if probed else b"1" * part.count for _, _, part, probed in parts]
        # 2. record the IPs that might count (the scripts check again, atomically)
        todo = [(i, h, part, f) for (i, h, part, _), f in zip(parts, flags) if b"1" in f]
        if not todo:  # every IP's group record is fresh: nothing can count
            return out
        month = month_of(now)
        for _ in range(WIDTH_TRIES):
            if self._place_shards is not None:
                batches, place_calls = self._place_shards.plan(now_i, todo, month)
                if place_calls:
                    self._run_places(now_i, month, place_calls)
                calls = self._place_shards.fill(batches)
            else:
                batches = RecordBatches(self.batch_pairs, month, mixed=True)
                for i, _, part, f in todo:
                    add_visit(batches, i, part, f, self.fingerprints.buckets, self.fresh_places, now_i - self.window,
                              now_i)
                calls = batches.calls
                swarms_in(calls, todo)
            counted, short = self._run(now_i, calls)
            for i, new in counted:
                out[i] += new
            # a call that lacked a width its torrent's marks are at, or held blocks of a torrent counted
            # after all, wrote nothing: its visits go again, with the widths, without blocks (their IPs
            # that other calls counted count nothing the second time)
            todo = [(i, h, part, f) for i, h, part, f in todo if i in short]
            if not todo:
                return out
            for i, _, part, _ in todo:
                if short[i] & COUNTED:
                    part.fresh = False
                part.widen(short[i] & ~COUNTED)
        raise StoreError(f"recording peers failed: the widths of {len(todo)} torrents' marks moved "
                         f"{WIDTH_TRIES} times while they were recorded")

    def _parts(self, visits: Sequence[tuple[str, list[Met]]], now: int, probes: Sequence[bool] | None,
               first: bool, key: Callable | None) -> list:
        """Each visit's part, ``(position, info-hash, VisitPart, probed)``, with its swarm record
        (``key(position, t_fp, ips)``; None: none), but for those it settles when it is asked for ``first``, before
        the probes (``swarm_record.Lookups``)."""
        fps = self.fingerprints
        todo: list[tuple] = []  # (position, info-hash, torrent fingerprint, IPs, swarm record, probed)
        asked: list[tuple] = []
        for i, (info_hash, ips) in enumerate(visits):
            h = info_hash_hex(info_hash)
            if ips:
                t_fp = fps.torrent(h)
                probed = probes is None or probes[i]
                swarm = None if key is None else key(i, t_fp, ips)
                (asked if probed and first and swarm else todo).append((i, h, t_fp, ips, swarm, probed))
        if asked:
            settled = self._settled(now, [(a[0], a[1], a[4]) for a in asked])
            todo += [a for a in asked if a[0] not in settled]
            todo.sort(key=lambda a: a[0])
        parts = []
        for i, h, t_fp, ips, swarm, probed in todo:
            if (part := self._probe_calls(h, t_fp, ips, probed)) is not None:
                part.swarm = swarm
                # unprobed: a torrent never visited, never counted but by a visit of it another
                # process made meanwhile (record.lua then says so)
                part.fresh = not probed
                parts.append((i, h, part, probed))
        return parts

    def _settled(self, now: int, asked: list[tuple]) -> set[int]:
        """The positions of the visits ``asked`` (position, info-hash, swarm record) whose record is fresh,
        asked for in one round trip before their probes (``swarm_record.check_calls``)."""
        if not asked:
            return set()
        groups, calls = check_calls(self._check_script, self._home, now - self.window, asked)
        settled = settled_of(groups, self._send(calls))
        self.swarms.saw(len(settled), len(asked))
        return settled

    def _home(self, h: str) -> ShardKeys:
        """The shard holding the counters of torrent ``h`` (its probes and swarm record)."""
        return self._shards[shard_of(h, len(self._shards)) if self._place_shards is not None else 0]

    def _probe_calls(self, h: str, t_fp: int, ips: list[Met], probe: bool = True) -> VisitPart | None:
        """The visit's part in its torrent's shard, with its probe.lua calls of ``PROBE_IPS``
        IPs (``packing.visit_part``; ``ips``: distinct, as ``met_ips`` gives them; ``t_fp``: the
        torrent's fingerprint; ``probe`` False: none)."""
        return visit_part(self._home(h), h, t_fp, ips, self.fingerprints.buckets, self._place_info,
                          self._place_shards is not None, PROBE_IPS if probe else 0,
                          self.fingerprints.width_base(t_fp), self._legacy)

    def _probe_many(self, now: int, parts: list[VisitPart], first: bool) -> list[bytes]:
        """Run the probe.lua calls of ``parts`` in one round trip: per part one flag byte per IP (a part
        of one call looks its swarm record up first, all "0" when fresh, and has it written when every
        IP is); the records' answers count in ``lookups`` unless the batch asked for them ``first``."""
        cutoff, script = now - self.window, self._probe_script
        calls, carried = [], 0
        for part in parts:
            swarm = probe_arg(part)
            carried += bool(swarm)
            for p in part.probes:
                numbers = p.bnumbers
                widths = numbers.setdefault(part.b0, len(numbers) + 1).to_bytes(2, "big") + part.base
                args = [cutoff, part.h, bytes(p.args), *(swarm or (b"",)), widths]
                calls.append((script, [part.shard.torrents, *bucket_keys(numbers, part.shard)], args))
        replies = iter(self._send(calls))
        out, found = [], 0
        for part in parts:
            flags = b""
            for _ in part.probes:  # each call's flags, then the codes of the widths the torrent's marks are at
                r = next(replies)
                if r != SETTLED and r:
                    part.widen(r[-1])
                    r = r[:-1]
                flags += r
            if flags == SETTLED:  # its swarm record is fresh: nothing of it can count
                found += 1
                flags = b"0" * part.count
            out.append(flags)
        # the records travelled with the probes unless asked for first: their answers are counted here
        self.swarms.saw(found, 0 if first else carried)
        return out

    def _send(self, calls: list, wait=None, own: bool = False) -> list:
        """``Store.run`` of the recording's script ``calls``, the record calls (``own``: each
        milliseconds of Redis) in a round trip of their own; raises ``StoreError``."""
        try:
            return self.store.run(calls, wait=wait, own=own)
        except redis.RedisError as e:
            raise StoreError(f"recording peers failed: {e}") from e

    def _run_places(self, now: int, month: str, calls: list) -> None:
        """Run the place calls of a crawl of several shards (``PlaceShards.run``): one round
        trip, before the torrent parts can be built."""
        assert self._place_shards is not None  # a crawl of several shards has them
        self._place_shards.run(now, month, calls)

    def _place_info(self, pkey: tuple) -> PlaceInfo:
        """Escaped names and metric fingerprints of a place (cached per process)."""
        info = self._places.get(pkey)
        if info is None:
            if len(self._places) > 100_000:  # bounded: the world has ~100k cities
                self._places.clear()
            info = self._places[pkey] = PlaceInfo(pkey, self.fingerprints)
            if info.dropped:  # names over the bound, in a place not from the locator
                self._geo_errors.dropped(info.dropped)
        return info

    def _run(self, now: int, calls: list[RecordBatch]) -> tuple[list[tuple[int, int]], dict[int, int]]:
        """Run ``record.lua`` once per batch of ``calls`` (each in its shard), all in one
        round trip, in order.

        Returns ``(position, count of torrents.<h>.users)`` per visit of each call that ran, and
        per visit of a call that wrote nothing, what it lacked (``record_replies``).
        """
        script, post, cutoff = self._record, self._post, now - self.window
        runs = []
        for b in calls:
            keys = b.all_keys()
            if len(keys) > 65535:  # pragma: no cover - batch_pairs keeps it far below
                raise ValueError("batch too large")
            runs.append((script, keys, b.args(now, cutoff, post)))
        if not runs:
            return [], {}
        replies = self._send(runs, self._wait, own=True)
        out: list[tuple[int, int]] = []
        short: dict[int, int] = {}
        for b, r in zip(calls, replies, strict=True):
            out += read_reply(b, r, short, self.fresh_places)
        return out, short

    # --- torrents.processed ----------------------------------------------
    def visited(self, info_hash: str, now: float) -> bool:
        """Note one visit of ``info_hash`` for ``torrents.processed`` (StatHat, ``processed``): True
        when this visit added 1 to its shard's outbox; always False when StatHat is off."""
        return self.processed.visited(info_hash, now) if self.processed is not None else False
