"""Recording in a crawl of several counter shards (contract §9).

The place metrics of new IPs go to their own shards, then each torrent's part
to its shard.

Strategy: a torrent's metrics (``torrents.<h>.*``: the torrent's users, its
countries, cities and postcodes, and the IPs' group records) live whole in
the torrent's shard (``keys.shard_of``), and only the place metrics
(``countries.*``) are split by IP: an IP's place marks and their counts
live in the shard of its keyed fingerprint (``keys.shard_of_fingerprint``),
whose parts ``rollup`` adds up into exact totals. Why not split everything
by IP: every visit would then touch every shard (docs/metrics.md,
"Shards", has the measured cost). A batch of visits then costs, after the
probes in their torrents' shards (a revisit of known peers ends there),
one places.lua call per shard holding some of their new IPs (all
pipelined), and record.lua's torrent part in each torrent's shard, which
makes each group record no younger than the IP's place marks (places.lua
answers their times), so a fresh group record still means nothing of the
IP can count. Killed between the two round trips, a visit has counted its
places and not its torrent: the retry finds the place marks fresh and
counts exactly the rest.

A process remembers, per (IP, place), the oldest place mark time
places.lua answered (``fresh_places``): until that time is a window old it
skips the IP's place call and passes that time on, so an IP in many swarms
costs one place call per process per window.

A torrent never visited (``VisitPart.fresh``) has no marks in its shard:
its torrent parts go in blocks, a roster bucket at a time, which record.lua
adds whole (``PartBlocks``; ``packing`` has the reason and the layout); a
torrent counted after all is answered unwritten and sent again as records.
"""

from __future__ import annotations

import redis

from crawler.counters.fresh_places import FreshPlaces
from crawler.counters.places import PlaceInfo
from crawler.counters.script_args import (
    FRESH,
    LOW64,
    PlaceCall,
    RecordBatch,
    RecordBatches,
    ShardKeys,
    VisitPart,
    bucket_keys,
)
from crawler.errors import StoreError
from crawler.store.replica_wait import Wait
from crawler.store.scripts import register


class PlaceShards:
    """Recording across counter shards (module note): the place calls in the IPs' shards and
    the torrent parts that wait on their answers.

    ``store``: the recorder's ``Store``; ``shards``: the counter shards' ``ShardKeys``, in
    shard order; ``post_countries``: whether the ``countries.*`` counts go to the StatHat
    outbox; ``wait``: the replicas each recording waits for (``Wait``, or None);
    ``window``: the dedupe window in seconds; ``batch_pairs``: the most (metric, IP)
    pairs of one call; ``buckets``: mark buckets per shard. ``fresh``: the place marks
    this process knows to be fresh.
    """

    def __init__(self, store, shards: list[ShardKeys], *, post_countries: bool, wait: Wait | None, window: int,
                 batch_pairs: int, buckets: int):
        self.store, self.shards, self.wait = store, shards, wait
        self.window, self.batch_pairs, self.buckets = window, batch_pairs, buckets
        self.post = "c" if post_countries else "-"
        self.script = register(store.client, "places", package=__package__)
        self.fresh = FreshPlaces()

    def plan(self, now: int, todo: list, month: str) -> tuple[RecordBatches, list[PlaceCall]]:
        """The calls recording ``todo`` (``(position, info-hash, part, flags)``: the IPs the
        probe flags say might count) takes in a crawl of several shards: the places.lua
        calls of the IPs' place metrics, in their own shards, and the torrent parts for
        the torrents' shards (record.lua's part "T"), which ``fill`` completes once
        ``run`` has the place calls' answers.

        Calls never split an IP's metrics and hold at most ``batch_pairs`` pairs. An
        IP whose place marks this process knows to be fresh gets no place call
        (module note); an IP and place met in several visits is sent once, and an IP
        met with two places goes in two calls (one call reads its buckets once, so
        two records of one IP in it would miss each other's marks).
        """
        open_calls: dict[int, PlaceCall] = {}
        calls: list[PlaceCall] = []
        placed: dict[int, object] = {}  # IP fingerprint XOR hash(place) -> where its answer comes from
        batches = RecordBatches(self.batch_pairs, month, torrent_part=True)
        for i, _, part, flags in todo:
            self._torrent_part(now, batches, i, part, flags, placed, open_calls, calls)
        return batches, calls

    def fill(self, batches: RecordBatches) -> list[RecordBatch]:
        """The torrent parts' record.lua calls, each IP's record given its oldest place mark
        time (known fresh, or answered by ``run``)."""
        learn = self.fresh.learn
        for b in batches.calls:
            ips = b.ips
            for rec, info, where in b.pending:
                if info is None:  # a visit's torrent parts in blocks, before its records (``PartBlocks``)
                    ips += rec.arg(b, where, learn)
                    continue
                if where.__class__ is tuple:
                    t = where[0].oldest(where[1])
                    learn(where[2], t)
                    rec |= t << info.t_oshift
                elif where is not None:
                    rec |= where << info.t_oshift
                ips += rec.to_bytes(info.t_nbytes, "big")
        return batches.calls

    def _torrent_part(self, now: int, batches: RecordBatches, i: int, part: VisitPart, flags: bytes,
                      placed: dict, open_calls: dict[int, PlaceCall], calls: list[PlaceCall]) -> None:
        """Add visit ``i``'s torrent part to the record.lua calls of ``batches`` (each IP's
        record still without its oldest place mark time, kept in ``pending``), and its
        IPs to the places.lua calls of their shards."""
        cutoff = now - self.window
        country_keys = part.shard.country_keys
        wide = part.others or part.legacy
        # a torrent believed never counted: its parts in blocks, in the visit's first call
        blocks, first = None, None
        for (pkey, (info, lanes, _, _), f, bucket, rb, key), flag in zip(part.rows, flags):
            if flag == FRESH:
                continue
            batch = batches.batch_for(part, i, info.t_k)
            if first is None:
                first = batch
                blocks = PartBlocks(now, batch, part.t_fp) if part.fresh and not wide else None
            if wide:  # its torrent's marks may also be elsewhere (``VisitPart``)
                batch.add_extras(part, f, self.buckets)
            where = None
            if info.p_m:
                where = placed.get(key)
                if where is None:
                    where = placed[key] = self._place_call(pkey, info, f, key, cutoff, open_calls, calls)
            if blocks is not None and batch is first:
                blocks.add(batch, pkey, info, f, bucket, where)
                continue
            head = batch.heads.get(pkey)
            if head is None:
                head = batch.add_place(pkey, info, country_keys)
            batch.pending.append((batch.torrent_record(info, head, lanes, f, bucket, rb), info, where))

    def _place_call(self, pkey: tuple, info: PlaceInfo, f: int, key: int, cutoff: int,
                    open_calls: dict[int, PlaceCall], calls: list[PlaceCall]) -> int | tuple[PlaceCall, int, int]:
        """Where an IP's oldest place mark time will come from: the time, when this process
        knows its place marks are fresh (module note); else ``(call, position, key)``
        once the IP is added to a places.lua call of its shard (``open_calls``: the last
        call per shard; ``calls``: every call). ``key``: the IP's fingerprint XOR
        hash(place), the freshness cache's key."""
        t = self.fresh.since(key, cutoff)
        if t:
            return t
        s = (f >> 104) % len(self.shards)  # keys.shard_of_fingerprint, inlined
        call = open_calls.get(s)
        if call is None or call.pairs + info.p_m > self.batch_pairs or f in call.fps:
            call = open_calls[s] = PlaceCall(self.shards[s])
            calls.append(call)
        call.fps.add(f)
        call.ips += ((call.bucket_number((f >> 64) % self.buckets) << info.p_bshift)
                     | call.place_head(pkey, info) | (info.p_g ^ (f & LOW64) * info.p_r)).to_bytes(info.p_nbytes, "big")
        call.n += 1
        call.pairs += info.p_m
        return call, call.n - 1, key

    def run(self, now: int, month: str, calls: list[PlaceCall]) -> None:
        """Run the places.lua ``calls`` (each in its shard) in one round trip; each call's
        ``answer`` gets its IPs' oldest place mark times."""
        script = self.script
        runs = [(script, c.shard.place_fixed + bucket_keys(c.bnumbers, c.shard),
                 [now, now - self.window, self.post, month, bytes(c.countries), bytes(c.places), bytes(c.ips)])
                for c in calls]
        try:
            replies = self.store.run(runs, wait=self.wait, own=True)  # a recording batch's (Store.run)
        except redis.RedisError as e:
            raise StoreError(f"recording peers failed: {e}") from e
        for c, r in zip(calls, replies):
            if len(r) != 4 * c.n:
                raise StoreError(f"recording peers failed: places.lua answered {len(r)} bytes for {c.n} IPs")
            c.answer = r


class PartBlocks:
    """The torrent parts of a visit of a torrent believed never counted (``VisitPart.fresh``), in
    blocks as ``packing.first_call`` makes them in one shard's calls, but whose group records
    wait for the place calls' answers: each takes its IP's oldest place mark time, no later than
    ``now``."""

    __slots__ = ("blocks", "now", "places", "t_fp")

    def __init__(self, now: int, batch: RecordBatch, t_fp: int):
        self.now, self.t_fp = now, t_fp
        batch.pending.append((self, None, batch.visits[-1]))  # where the visit's records would start
        # mark bucket -> (IPs per place number, group record fields and where their times come from,
        # torrent marks as records of ``now``)
        self.blocks: dict[int, tuple[dict[int, int], list, bytearray]] = {}
        # place tuple -> its number in the call, its torrent records (``PlaceInfo.torrent_records``), their
        # multiplier, shift and mask, the records' bytes
        self.places: dict[tuple, tuple] = {}

    def add(self, batch: RecordBatch, pkey: tuple, info: PlaceInfo, f: int, bucket: int, where) -> None:
        """The torrent part of the IP of fingerprint ``f`` at place ``pkey``, its oldest place mark time
        from ``where`` (``PlaceShards._place_call``; None: no place)."""
        bp = self.places.get(pkey)
        if bp is None:
            bp = self.places[pkey] = (batch.place_number(pkey, info, batch.shard.country_keys),
                                      info.torrent_records(self.t_fp, self.now), info.t_r96, info.t_rbits,
                                      info.t_rmask, info.t_rbytes)
        n, lanes, t_r, fbits, fmask, fbytes = bp
        block = self.blocks.get(bucket)
        if block is None:
            block = self.blocks[bucket] = ({}, [], bytearray())
        at, groups, fields = block
        at[n] = at.get(n, 0) + 1
        v = lanes ^ (f & LOW64) * t_r  # the group record's field (with a place), then the torrent's records
        if where is not None:
            groups.append((v >> fbits, where))
        fields += (v & fmask).to_bytes(fbytes, "big")

    def arg(self, batch: RecordBatch, visit: list, learn) -> bytearray:
        """The blocks as record.lua reads them before the records of ``visit`` (``RecordBatch.blocks_arg``),
        each answered place time taught to ``learn`` (``FreshPlaces.learn``)."""
        now, blocks = self.now, {}
        for bucket, (at, groups, fields) in self.blocks.items():
            records = bytearray()
            for g, where in groups:
                if where.__class__ is tuple:
                    t = where[0].oldest(where[1])
                    learn(where[2], t)
                else:
                    t = where
                records += (g | (t if t < now else now)).to_bytes(12, "big")
            blocks[bucket] = (at, records, fields)
        return batch.blocks_arg(visit, blocks)
