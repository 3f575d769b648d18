-- record.lua: check-mark-increment of a batch of visits' peers in one shard, atomically.
--
-- KEYS[1]      outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- KEYS[2..5]   indexes  member -> count (ZSET), each lifetime index ({ns}:ix:all:<scope>)
--                       followed by its month index ({ns}:ix:<YYYY-MM>:<scope>):
--                       torrents, countries (no global cities or postcodes
--                       index: `stats` merges the per-country ones)
-- KEYS[..]     per visit (position given in ARGV[3]): its torrent's index
--              countries:t:H (HASH: one torrent's, sorted when read; its countries,
--              and its cities and postcodes with their family's prefix:
--              crawler.counters.names.TORRENT_FIELD), lifetime then month
-- KEYS[..]     per country (position given in ARGV[5]): torrents:c:C, cities:c:C,
--              postcodes:c:C (ZSET), each lifetime then month
-- KEYS[n+1..]   marks    STRING of 12-byte records: 8-byte field, then the unix second
--                       of the mark as a big-endian u32 ({ns}:mk:<n>): every bucket
--                       this batch may read, last. An IP's marks for the torrent
--                       and its group record share one of the torrent's roster
--                       (at the visit's width; others given as extras); its place
--                       marks one chosen by the IP alone (crawler/counters/marks.py).
-- ARGV[1]      now      unix seconds (integer): the time stored in new marks
-- ARGV[2]      cutoff   now - window: a mark at or before it has expired
-- ARGV[3]      visits   binary, per visit (distinct torrents): its info-hash (40
--                       lower-case hex), u16 key position of its two indexes, u32
--                       the number of its IP records in ARGV[8] (at least 1), its top
--                       bit set for a visit whose torrent parts come in blocks (the
--                       number then counts the records after them, and may be 0)
-- ARGV[4]      post     "cC" / "tT": which families go to the outbox (c = countries.*,
--                       t = torrents.*); "--" for none
-- ARGV[5]      countries binary, per country: u16 key position, str(escaped name)
-- ARGV[6]      places    binary, per place: u16 country number (1-based; 0 = unknown),
--                        str(escaped city), str(escaped postcode) (empty = unknown)
-- ARGV[7]      n         the number of keys before the mark buckets
-- ARGV[8]      ips       binary, the visits' IP records one visit after the other;
--                        per IP: u16 group record bucket (0 when k = 1), u16 torrent
--                        bucket, u16 place bucket (0 when k = 1) (1-based: KEYS[n + b]),
--                        u16 place number, u8 k; when k >= 3 the 8-byte field of the
--                        IP's group record for (torrent, place); then k 8-byte fields,
--                        one per metric of the place: the torrent's first (torrent,
--                        torrent-country, torrent-city, torrent-postcode), then the
--                        place's (country, city, postcode); parts the place lacks are
--                        absent. Metric slots number them torrent 1; country 2,
--                        torrent-country 3; city 4, torrent-city 5; postcode 6,
--                        torrent-postcode 7 (odd: the torrent's)
-- ARGV[9]      part      absent for the whole record above; "T" (a crawl of several
--                        shards) for the torrent part of each IP, whose place metrics
--                        places.lua has already recorded in the IP's own shard. Then
--                        an IP is: u16 group record bucket (0 when k = 1), u16 torrent
--                        bucket, u32 the oldest time of its place
--                        marks (places.lua's answer; 0 without a country), u16 place
--                        number, u8 k (1-4), the group record's field when k >= 2, and
--                        k fields: torrent; torrent-country; torrent-city;
--                        torrent-postcode. The group record becomes the oldest of the
--                        k marks and the place marks.
--                        "M" (one shard, mixed): each IP is a u8 form, then a whole
--                        record (form 0) or a torrent part (form 1) as above; a torrent
--                        part here stands for an IP whose place marks, in this shard,
--                        the caller knows are all fresh since the time it gives, so
--                        they are neither read nor written. Returns, after the
--                        visits' counts, one string: per whole record with a group
--                        record, in order, the oldest time of the IP's place marks
--                        after this call (u32), what makes its next records torrent
--                        parts (recorder.py). Empty: as absent.
--                        A visit flagged in ARGV[3] ("M" or "T" only, without extra
--                        buckets) is a torrent the caller believes this shard never
--                        counted: its records start with a u16 count of blocks, each
--                        the torrent parts of one roster bucket at once: u16 bucket
--                        (1-based), u16 m, then m (u16 place number, u16 IPs at it),
--                        then the group records of those IPs whose place has a
--                        country, whole (8-byte field, u32 the oldest time of the
--                        IP's place marks, fresh and not after now), then every IP's
--                        torrent marks (k each, a torrent part's fields) as records,
--                        each field followed by now (ARGV[1], u32; each block's first
--                        checked), in any order.
--                        Were the torrent counted here after all, the call is
--                        answered, before anything is written, with {'unfresh', one
--                        byte per visit: '1' for each such flagged visit}.
-- ARGV[10]     swarms    optional, binary, per visit whose IPs are all in this call and
--                        that has a swarm record (crawler/counters/swarm_record.py): u16
--                        visit number (1-based, ARGV[3]'s order), u16 bucket (1-based:
--                        KEYS[n + b]), the record's 8-byte field; the record is written
--                        (unless fresh already) with the oldest time of the visit's IPs'
--                        marks after the call.
-- ARGV[11]     widths    optional (empty: none), binary, 12 bytes per visit (ARGV[3]'s order):
--                        u16 the torrent's first roster bucket (1-based: KEYS[n + b]), u8
--                        the code of the visit's width (0-6: 4^code buckets; its IPs'
--                        torrent buckets are at it), u8 the codes whose buckets the call
--                        carries (a bit mask holding the visit's), u8 x: extra buckets per
--                        IP in ARGV[12], then the torrent's 7-byte width base (marks.lua's
--                        live_widths). With them, a torrent's marks are looked for at every
--                        width made within the window, and the width the visit writes at is
--                        noted.
-- ARGV[12]     extras    binary, per visit, per IP of it in this call (in order): x u16
--                        buckets (1-based) where its torrent marks may also be: the
--                        torrent's other widths given, or the (IP, torrent) bucket of a
--                        crawl that kept them so.
-- str = u16 length .. bytes; integers big endian.
--
-- Python sends only the IPs probe.lua found might count (their group record
-- missing or stale), with places and fingerprints; metric names and index
-- members are built only when something counted. Every pair is
-- checked here again (another worker may have recorded the IP since the
-- probe), except the marks of a torrent this shard never counted (not in
-- its lifetime torrents index when its visit begins: see `fresh` below), which
-- are all new: for each mark missing or expired, write it (one MSET of every
-- changed bucket's whole string at the end, not APPEND, so a string is
-- allocated at its exact size) and count one; the group record becomes the
-- oldest of its marks' times.
-- The visits are taken one after the other, each seeing the marks of those
-- before it, so a call counts exactly what one call per visit would; the
-- indexes they share (torrents, countries, the countries' own) are written
-- once per call.
-- Then add each metric's count to its indexes (lifetime and month) and, when its
-- family is posted, to the outbox. Returns, per visit, its count of
-- torrents.<h>.users. With widths, a call whose visit's torrent has marks at a
-- width it does not carry is answered, before anything is written, with
-- {'widths', one byte per visit: the codes it needs}: the caller sends it again
-- with their buckets (the probe's answer tells them, so this is rare).

--! include marks  (u32, read_buckets, check_mark, add_record, set_mark, write_buckets, live_widths,
--                   check_wide)
--! include places_arg  (u16, str, read_places)
--! include counts  (count_texts, count_text)

local byte, sub = string.byte, string.sub
-- a block's group record times: struct.unpack('>I4') costs less than byte() and the arithmetic
local struct_unpack = struct.unpack
local now, cutoff, post = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[4]
local stamp = u32(now)

-- Everything is read and checked before the first write (the MSET of the
-- marks); a malformed call fails with nothing written.
-- names: countries {key position, name}; places {country, city, postcode}
local tpart, mixed = ARGV[9] == 'T', ARGV[9] == 'M'
if ARGV[9] and ARGV[9] ~= '' and not tpart and not mixed then
  return redis.error_reply('record.lua: bad part ' .. ARGV[9])
end
-- positions after the outbox and the shared indexes: the visits' and countries' keys
local first_own = 6
local nfixed = tonumber(ARGV[7])
if not nfixed or nfixed < first_own - 1 or nfixed > #KEYS then
  return redis.error_reply('record.lua: bad key count ' .. tostring(ARGV[7]))
end
-- visits: {info-hash, key position of its indexes, IP records}
local visits, vs, occurs = {}, ARGV[3], {}
if #vs == 0 or #vs % 46 ~= 0 then
  return redis.error_reply('record.lua: visits of ' .. #vs .. ' bytes are not whole 46-byte records')
end
for v = 1, #vs, 46 do
  local vh, pos, c1, c2, c3, c4 = sub(vs, v, v + 39), u16(vs, v + 40), byte(vs, v + 42, v + 45)
  local blocked = c1 >= 128  -- its torrent parts come in blocks
  if blocked then c1 = c1 - 128 end
  local count = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
  if not string.match(vh, '^[0-9a-f]+$') or pos < first_own or pos + 1 > nfixed
      or count < (blocked and 0 or 1) or (blocked and not mixed and not tpart) then
    return redis.error_reply('record.lua: malformed visit at byte ' .. v)
  end
  visits[#visits + 1] = {vh, pos, count, blocked}
  occurs[vh] = (occurs[vh] or 0) + 1
end
local countries, cs, i = {}, ARGV[5], 1
while i <= #cs do
  local pos = u16(cs, i)
  local name
  name, i = str(cs, i + 2)
  if not pos or not name then
    return redis.error_reply('record.lua: malformed country at byte ' .. i)
  end
  if pos < first_own or pos + 5 > nfixed then
    return redis.error_reply('record.lua: country key position ' .. pos .. ' out of range')
  end
  countries[#countries + 1] = {pos, name}
end
-- country number 0: a place of unknown country
local places, bad = read_places(ARGV[6], 0, #countries)
if not places then
  return redis.error_reply('record.lua: malformed place or unknown country number at byte ' .. bad)
end

-- mark buckets: KEYS[nfixed + 1..], read with MGET (a missing one is '');
-- every read and write goes through vals
local nb = #KEYS - nfixed
-- swarm records: visit number -> {bucket, field}
local swarms, ws = {}, ARGV[10] or ''
if #ws % 12 ~= 0 then
  return redis.error_reply('record.lua: swarm records of ' .. #ws .. ' bytes are not whole 12-byte records')
end
for w = 1, #ws, 12 do
  local v, b = u16(ws, w), u16(ws, w + 2)
  if v < 1 or v > #visits or b < 1 or b > nb or swarms[v] then
    return redis.error_reply('record.lua: malformed swarm record at byte ' .. w)
  end
  swarms[v] = {b, sub(ws, w + 4, w + 11)}
end
-- widths: per visit {first roster bucket, code, codes given, extra buckets an IP, width base}
local widths, wa, xa = {}, ARGV[11] or '', ARGV[12] or ''
if wa ~= '' then
  if #wa ~= 12 * #visits then
    return redis.error_reply('record.lua: widths of ' .. #wa .. ' bytes for ' .. #visits .. ' visits (12 bytes a visit)')
  end
  local need = 0
  for v = 1, #visits do
    local w = 12 * v - 11
    local b0 = u16(wa, w)
    local code, given, x = byte(wa, w + 2, w + 4)
    local others = -1  -- the codes given but the visit's: each has its extra bucket an IP
    for c = 0, 6 do
      if bit.band(given, 2 ^ c) ~= 0 then others = others + 1 end
    end
    if b0 < 1 or b0 > nb or code > 6 or given > 127 or bit.band(given, 2 ^ code) == 0 or x > 7 or x < others
        or (x > 0 and visits[v][4]) then
      return redis.error_reply('record.lua: malformed widths of visit ' .. v)
    end
    widths[v] = {b0, code, given, x, sub(wa, w + 5, w + 11)}
    need = need + 2 * x * visits[v][3]
  end
  if #xa ~= need then
    return redis.error_reply('record.lua: extra buckets of ' .. #xa .. ' bytes, not ' .. need)
  end
elseif xa ~= '' then
  return redis.error_reply('record.lua: extra buckets without widths')
end
local vals = read_buckets(nfixed + 1)
local p = ARGV[8]
-- A torrent never counted in this shard has no marks here: its first marks
-- and its entry in the lifetime torrents index (KEYS[2]) are written by one
-- call of this script, and nothing removes the entry (probe.lua relies on
-- the same); within this call, by an earlier visit of it (whose index
-- writes wait for the end). Then every torrent mark of the visit is new
-- and is added without a search (a first visit's marks are mostly the
-- torrent's).
-- A visit's torrent marks are looked for at every width its torrent's marks were made at within the
-- window: a call that lacks one's buckets is answered with the codes each visit needs, unwritten.
local fresh_at, made = {}, {}  -- per visit: a torrent never counted here; torrent -> codes of its visits so far
local short, needs = false, {}
local unfresh, counted_after_all = false, {}  -- flagged visits of a torrent counted here: sent again unflagged
-- the visits' torrents in the lifetime torrents index, read once a call (in slices: unpack())
local counted_before = {}
for first = 1, #visits, 1000 do
  local hs = {}
  for v = first, math.min(first + 999, #visits) do hs[#hs + 1] = visits[v][1] end
  local got = redis.call('ZMSCORE', KEYS[2], unpack(hs))
  for j = 1, #hs do counted_before[first + j - 1] = got[j] end
end
for v = 1, #visits do
  local h, wv = visits[v][1], widths[v]
  local new = not made[h] and not counted_before[v]
  fresh_at[v] = new
  local again = visits[v][4] and not new
  counted_after_all[v] = again and '1' or '0'
  unfresh = unfresh or again
  if wv then
    local live = 0
    if not new then live = bit.bor(live_widths(vals[wv[1]], wv[5], cutoff), made[h] or 0) end
    made[h] = bit.bor(made[h] or 0, 2 ^ wv[2])
    needs[v] = string.char(bit.bor(live, wv[3]))
    if bit.band(live, bit.bnot(wv[3])) ~= 0 then short = true end
  else
    made[h] = made[h] or 0
  end
end
if unfresh then return {'unfresh', table.concat(counted_after_all)} end
if short then return {'widths', table.concat(needs)} end
local xo = 1  -- the next extra bucket in ARGV[12]

-- check, mark and count every pair (marks.lua: renewed marks are rewritten
-- in vals, new records wait in adds; changed buckets are written back with
-- one MSET at the end)
local dirty, adds = {}, {}
-- raw: bucket -> the fields (8 bytes each, no time) of the torrent marks of a torrent never counted
-- here that come in whole records, in pieces joined and stamped when they join the bucket (one gsub a
-- bucket rather than a string per field). A table: a first visit puts a dozen IPs' in each bucket of
-- its roster, and appending to one string copied it each time (the replayed calls took 0.8 of the time
-- with the table)
local raw = {}
-- ready: bucket -> the records of such a torrent that carry their own time (its group records, and
-- its blocks' torrent marks, which come stamped), in pieces, joined when they join the bucket as raw's
-- are (appended to one string a bucket, each record copied what the bucket's new records held so far)
local ready = {}
local stamp_rep = '%0' .. stamp:gsub('%%', '%%%%')
local function stamped(fields)
  return (fields:gsub('........', stamp_rep))
end
local o, np = 1, #p
-- a torrent part's fields are all the torrent's metrics (slots 1, 3, ...)
local grouped, head, kmax = 3, 9, 7
if tpart then grouped, head, kmax = 2, 11, 4 end
local places_at, nat = {}, 0  -- mixed: the oldest place mark time of each whole record with a group record
-- per visit: torrents.<h>.users and the counts per place number ({[j] = count}
-- for metric slot j, created when one counts; [8]: the IPs each of whose torrent
-- metrics at the place counts, a torrent never counted here, added to each at the end)
local users, counts, alone = {}, {}, {}
for v = 1, #visits do
  local h, left = visits[v][1], visits[v][3]
  if v > 1 then
    -- the visit sees the marks of those before it: their new records join vals
    for b, a in pairs(adds) do
      vals[b] = vals[b] .. a
      dirty[b] = true
    end
    for b, r in pairs(raw) do
      vals[b] = vals[b] .. stamped(table.concat(r))
      dirty[b] = true
    end
    for b, r in pairs(ready) do
      vals[b] = vals[b] .. table.concat(r)
      dirty[b] = true
    end
    adds, raw, ready = {}, {}, {}
  end
  local fresh = fresh_at[v]  -- a torrent never counted here (above)
  local wv = widths[v]
  local nx = wv and wv[4] or 0
  local wrote = false  -- a torrent mark of the visit was written (at its width)
  local t_users, counted = 0, {}
  local vmin = now  -- the oldest mark time of the visit's IPs (its swarm record's)
  if visits[v][4] then
    -- its torrent parts in blocks, a roster bucket's at once (a torrent never counted here: checked
    -- above): every field is new and counts, added to its bucket without a search
    local nblocks = u16(p, o)
    if not nblocks then
      return redis.error_reply('record.lua: malformed block count at byte ' .. o)
    end
    o = o + 2
    for _ = 1, nblocks do
      local at = o
      local tb, m = u16(p, o), u16(p, o + 2)
      if not m or tb < 1 or tb > nb or m < 1 or o + 3 + 4 * m > np then
        return redis.error_reply('record.lua: malformed block at byte ' .. at)
      end
      o = o + 4
      local ng, nf = 0, 0  -- its group records and torrent fields
      for _ = 1, m do
        local p1, p2, n1, n2 = byte(p, o, o + 3)  -- within the block: its size is checked above
        local pno, n = p1 * 256 + p2, n1 * 256 + n2
        local pl = places[pno]
        if not pl or n < 1 then
          return redis.error_reply('record.lua: malformed block at byte ' .. at)
        end
        t_users = t_users + n
        local k = 1  -- the torrent's metrics of the place: users, then one a part of the place
        if pl[1] > 0 then
          k = 1 + pl[4]
          ng = ng + n
          local pc = counted[pno]
          if not pc then
            pc = {0, 0, 0, 0, 0, 0, 0, 0}
            counted[pno] = pc
          end
          pc[8] = pc[8] + n
        end
        nf = nf + k * n
        o = o + 4
      end
      local ge = o + 12 * ng - 1  -- the group records' last byte
      local fe = ge + 12 * nf  -- the torrent marks' last byte
      if fe > np then
        return redis.error_reply('record.lua: malformed block at byte ' .. at)
      end
      for x = o + 8, ge, 12 do
        local t = struct_unpack('>I4', p, x)
        if t <= cutoff or t > now then
          return redis.error_reply('record.lua: group record time ' .. t .. ' out of the window at byte ' .. x)
        end
        if t < vmin then vmin = t end
      end
      if ng > 0 then
        local a = adds[tb]
        adds[tb] = (a or '') .. sub(p, o, ge)
      end
      if nf > 0 then
        -- the torrent marks come as records of this call's time and join the bucket as they came
        -- (stamping their fields here was 0.07 of a first visit's Redis work); the first of each block
        -- is checked, so a caller stamping with another time is refused (checking every one cost more
        -- than the stamping spared)
        if sub(p, ge + 9, ge + 12) ~= stamp then
          return redis.error_reply('record.lua: a torrent mark of a block not made now, at byte ' .. (ge + 9))
        end
        local r = ready[tb]
        if not r then
          ready[tb] = {sub(p, ge + 1, fe)}
        else
          r[#r + 1] = sub(p, ge + 1, fe)
        end
        wrote = true
      end
      o = fe + 1
    end
  end
  while left > 0 do
    left = left - 1
    local rb, tb, gb, pno, k
    local oldest, ptime = now, nil
    local part, pat, pv = tpart, nil, nil
    if mixed then  -- this IP's form: 0 whole, 1 torrent part
      local form = byte(p, o)
      if form == 1 then
        part, grouped, head, kmax = true, 2, 11, 4
      elseif form == 0 then
        grouped, head, kmax = 3, 9, 7
      else
        return redis.error_reply('record.lua: malformed peer record at byte ' .. o)
      end
      o = o + 1
    end
    if part then
      local r1, r2, t1, t2, o1, o2, o3, o4, p1, p2, kk = byte(p, o, o + 10)
      if kk then
        rb, tb, gb, pno, k = r1 * 256 + r2, t1 * 256 + t2, 1, p1 * 256 + p2, kk
        local po = ((o1 * 256 + o2) * 256 + o3) * 256 + o4
        if k > 1 and po < oldest then oldest, pat, pv = po, o + 4, po end  -- pat: where its 4 bytes are
        -- mixed: the place marks must still be fresh (else they would count: a whole record)
        if mixed and k > 1 and po <= cutoff then k = nil end
      end
    else
      local r1, r2, t1, t2, g1, g2, p1, p2, kk = byte(p, o, o + 8)
      if kk then
        rb, tb, gb, pno, k = r1 * 256 + r2, t1 * 256 + t2, g1 * 256 + g2, p1 * 256 + p2, kk
        if k % 2 == 0 then k = nil end
      end
    end
    -- a whole record, known place and buckets (k: the users mark, then pairs of
    -- place metrics, or only the torrent's in the torrent part; the group record
    -- when the place has a country)
    if not k or k < 1 or k > kmax or o + head - 1 + 8 * (k < grouped and 1 or k + 1) > np
        or pno < 1 or pno > #places or tb < 1 or tb > nb or (k > 1 and (gb < 1 or gb > nb))
        or (k >= grouped) ~= (rb >= 1) or rb > nb
        or (k > 1) ~= (places[pno][1] > 0) then
      return redis.error_reply('record.lua: malformed peer record at byte ' .. o)
    end
    o = o + head
    -- the buckets where the IP's torrent marks may also be (other widths)
    local ex
    if nx > 0 then
      ex = {}
      for e = 1, nx do
        local b = u16(xa, xo)
        if b < 1 or b > nb then
          return redis.error_reply('record.lua: extra bucket out of range at byte ' .. xo)
        end
        ex[e] = b
        xo = xo + 2
      end
    end
    local gf
    if k >= grouped then
      gf = sub(p, o, o + 7)
      o = o + 8
    end
    local pc
    if fresh then wrote = true end
    if part and fresh then
      -- a torrent part of a torrent never counted here: its k marks are all the torrent's, all new
      -- (added to bucket tb without a search, their fields in one piece) and all count
      local r = raw[tb]
      if not r then
        raw[tb] = {sub(p, o, o + 8 * k - 1)}
      else
        r[#r + 1] = sub(p, o, o + 8 * k - 1)
      end
      o = o + 8 * k
      t_users = t_users + 1
      if k > 1 then
        pc = counted[pno]
        if not pc then
          pc = {0, 0, 0, 0, 0, 0, 0, 0}
          counted[pno] = pc
        end
        pc[8] = pc[8] + 1
      end
    elseif fresh and not part then
      -- a whole record of a torrent never counted here: its torrent marks (its first (k + 1) / 2
      -- fields) are all new, added to bucket tb in one piece as a torrent part's are, and all count;
      -- its place marks (the rest) are checked in bucket gb
      local at = o + 4 * (k + 1)  -- its first place field
      local r = raw[tb]
      if not r then
        raw[tb] = {sub(p, o, at - 1)}
      else
        r[#r + 1] = sub(p, o, at - 1)
      end
      t_users = t_users + 1
      if k > 1 then
        pc = counted[pno]
        if not pc then
          pc = {0, 0, 0, 0, 0, 0, 0, 0}
          counted[pno] = pc
        end
        pc[8] = pc[8] + 1
        for j = 2, k, 2 do
          local t = check_mark(vals, dirty, adds, gb, sub(p, at, at + 7), stamp, cutoff)
          at = at + 8
          if t then
            if t < oldest then oldest = t end
          else
            t = now
            pc[j] = pc[j] + 1
          end
          if t < (ptime or now + 1) then ptime = t end
        end
      end
      o = o + 8 * k
    else
      -- the first nt fields are the torrent's metrics (odd slots, bucket tb), the rest the place's
      -- (even slots, bucket gb)
      local nt = part and k or (k + 1) / 2
      for i = 1, k do
        local f = sub(p, o, o + 7)
        o = o + 8
        local j = i <= nt and 2 * i - 1 or 2 * (i - nt)
        local b = tb
        if j % 2 == 0 then b = gb end
        local t
        if ex and j % 2 == 1 and not fresh then
          t = check_wide(vals, dirty, adds, b, ex, f, stamp, cutoff)
          if not t then wrote = true end
        elseif not fresh or j % 2 == 0 then
          t = check_mark(vals, dirty, adds, b, f, stamp, cutoff)
          if not t and j % 2 == 1 then wrote = true end
        else
          add_record(adds, b, f, stamp)
        end
        if j % 2 == 0 and (t or now) < (ptime or now + 1) then ptime = t or now end
        if t then
          if t < oldest then oldest = t end
        else
          if j == 1 then
            t_users = t_users + 1
          else
            pc = pc or counted[pno]
            if not pc then
              pc = {0, 0, 0, 0, 0, 0, 0, 0}
              counted[pno] = pc
            end
            pc[j] = pc[j] + 1
          end
        end
      end
    end
    if oldest < vmin then vmin = oldest end
    if mixed and gf and not part then
      nat = nat + 1
      places_at[nat] = ptime == now and stamp or u32(ptime)
    end
    if gf then
      -- the group record, missing or stale (or in a roster the swarm has left): now the oldest
      -- of the k marks, in the torrent's roster. A torrent never counted has no record there.
      local at = stamp
      if oldest ~= now then
        -- a torrent part whose place time is the oldest carries its bytes (no u32 to build)
        at = oldest == pv and sub(p, pat, pat + 3) or u32(oldest)
      end
      if fresh then
        local r = ready[rb]
        if not r then
          ready[rb] = {gf, at}
        else
          local n = #r
          r[n + 1], r[n + 2] = gf, at
        end
      else
        set_mark(vals, dirty, adds, rb, gf, at)
      end
    end
  end
  if wv and wrote then
    -- the width the visit wrote at holds marks until this time's window passes
    local wf = wv[5] .. string.char(wv[2])
    if fresh then
      add_record(adds, wv[1], wf, stamp)
    else
      set_mark(vals, dirty, adds, wv[1], wf, stamp)
    end
  end
  local sw = swarms[v]
  if sw then
    -- nothing of these IPs can count until the oldest of their marks expires (swarm_record.py)
    local at = vmin == now and stamp or u32(vmin)
    if fresh then
      add_record(adds, sw[1], sw[2], at)
    else
      check_mark(vals, dirty, adds, sw[1], sw[2], at, cutoff)
    end
  end
  users[v], counts[v] = t_users, counted
  -- a torrent never counted here, alone in this call: its indexes hold nothing yet
  alone[v] = fresh and occurs[h] == 1
end
if o <= np then
  return redis.error_reply('record.lua: malformed peer record at byte ' .. o .. ' (after the last visit)')
end
if xo <= #xa then
  return redis.error_reply('record.lua: extra buckets at byte ' .. xo .. ' (after the last visit)')
end
for b, r in pairs(raw) do
  adds[b] = (adds[b] or '') .. stamped(table.concat(r))
end
for b, r in pairs(ready) do
  adds[b] = (adds[b] or '') .. table.concat(r)
end
write_buckets(nfixed + 1, vals, dirty, adds)

-- Increments are gathered per index pair (the lifetime index at key position
-- q, its month index at q + 1 gets the same counts), then applied with two
-- calls per key (read the old counts, write the new ones) instead of one
-- ZINCRBY or HINCRBY per member: a visit of 200 new peers touches ~1,100
-- (index, member) pairs but only ~170 keys, and each redis.call costs more
-- than the command; the visits of a call share the torrents, countries and
-- per-country indexes. A torrent's index is a hash: a new torrent's gets ~100
-- members at once, which a small sorted set inserts one by one in order; its
-- three families in one (a key a torrent and period, not three: a new key
-- costs more than its members). Positions: torrents 2, countries 4; per
-- visit (ARGV[3]) its torrent's at pos; per country (ARGV[5]) its torrents
-- at pos, cities pos + 2, postcodes pos + 4.
local post_c, post_t = sub(post, 1, 1) == 'c', sub(post, 2, 2) == 't'
local zinc, box, hashes = {}, {}, {}  -- lifetime key position -> {member -> n}; stat -> n; HASH positions
-- bare: key positions whose members this call adds are known absent from the index (lifetime and
-- month): a torrent never counted in this shard, alone in the call, is in no index yet (its first
-- count writes it to the lifetime torrents index in the same call, and nothing removes it), so its
-- own indexes, and a torrents index (the crawl's, a country's) that only such torrents join, are
-- written unread
local bare = {}
local function incr(q, member, n)
  local t = zinc[q]
  if not t then
    t = {}
    zinc[q] = t
  end
  t[member] = (t[member] or 0) + n
end
local function out(stat, n)
  box[stat] = (box[stat] or 0) + n
end

local families = {'cities', 'postcodes'}
-- Where a torrent's cities and postcodes are kept in its one hash: their members behind these
-- (crawler.counters.names.TORRENT_FIELD; an escaped name never starts with either).
local tprefixes = {'%c', '%p'}
-- The country of the IPs no country holds (crawler.counters.names.UNPLACED_MEMBER): counted in the
-- indexes, never posted (it has no city or postcode).
local UNPLACED = '%unplaced'
for v = 1, #visits do
  local h, tpos = visits[v][1], visits[v][2]
  local new_t = alone[v]
  if new_t then bare[tpos] = true end
  local t_users = users[v]
  hashes[tpos] = true
  local th = post_t and 'torrents.' .. h
  if t_users > 0 then
    incr(2, h, t_users)
    bare[2] = new_t and bare[2] ~= false
    if post_t then out(th .. '.users', t_users) end
  end
  for pno, pc in pairs(counts[v]) do
    local pl = places[pno]  -- a place that counted has a country
    local all = pc[8]  -- its IPs whose torrent metrics at the place all count: one more in each
    if all > 0 then
      for j = 3, 2 * pl[4] + 1, 2 do pc[j] = pc[j] + all end
    end
    local country = countries[pl[1]]
    local pos, cname = country[1], country[2]
    local posted = cname ~= UNPLACED
    local n = pc[2]
    if n > 0 then
      incr(4, cname, n)
      if post_c and posted then out('countries.' .. cname .. '.users', n) end
    end
    n = pc[3]
    if n > 0 then
      incr(tpos, cname, n)
      incr(pos, h, n)
      bare[pos] = new_t and bare[pos] ~= false  -- the country's torrents: all new to it, or not
      if post_t and posted then out(th .. '.countries.' .. cname .. '.users', n) end
    end
    -- slots: city 4 and 5 when the place has a city, then postcode
    local j = 4
    for f = 1, 2 do
      local name = pl[f + 1]
      if name ~= '' then
        local family = families[f]
        n = pc[j]
        if n > 0 then
          incr(pos + 2 * f, name, n)
          if post_c then out('countries.' .. cname .. '.' .. family .. '.' .. name .. '.users', n) end
        end
        n = pc[j + 1]
        if n > 0 then
          -- the member in the torrent's index (the family's prefix, "country.name"), made once a
          -- call per place
          local member = pl[4 + f]
          if not member then
            member = tprefixes[f] .. cname .. '.' .. name
            pl[4 + f] = member
          end
          incr(tpos, member, n)
          if post_t then out(th .. '.countries.' .. cname .. '.' .. family .. '.' .. name .. '.users', n) end
        end
        j = j + 2
      end
    end
  end
end

-- add counts[m] to each member m of ms in each of keys (counts go as their text: count_text);
-- members in slices, since unpack() of a huge list would overflow Lua's stack.
local function apply(keys, ms, counts, read, write)
  local n, zset = #ms, write == 'ZADD'
  local first, second = 1, 0  -- the member's and the count's places before 2j
  if zset then first, second = 0, 1 end
  if n == 1 then
    local m = ms[1]
    local c = count_text(counts[m])
    for _, key in ipairs(keys) do
      if zset then
        redis.call('ZINCRBY', key, c, m)
      else
        redis.call('HINCRBY', key, m, c)
      end
    end
    return
  end
  for i = 1, n, 1000 do
    local part, last = ms, math.min(i + 999, n)
    if i > 1 or last < n then part = {unpack(ms, i, last)} end
    for _, key in ipairs(keys) do
      -- counts[m] plus the stored count, as text: the member's pair, score first in a sorted
      -- set, field first in a hash
      local old = redis.call(read, key, unpack(part))
      local args = {}
      for j = 1, #part do
        local m = part[j]
        local v = (tonumber(old[j]) or 0) + counts[m]
        local a = 2 * j
        args[a - first], args[a - second] = m, count_texts[v] or count_text(v)
      end
      redis.call(write, key, unpack(args))
    end
  end
end
-- write counts (member -> n) to keys known to hold none of their members (a lifetime index and
-- its month's, both bare): unread, every key the same arguments, built once straight from counts,
-- in slices of 1,000 members. Most are a new torrent's own indexes of a few members each, where
-- the list of members, a table of keys and the generic loop above cost more than the writes.
local function write_new(q, counts, zset)
  local write, first, second = 'HSET', 1, 0  -- the member's and the count's places before 2j
  if zset then write, first, second = 'ZADD', 0, 1 end
  local args, j = {}, 0
  local lifetime, month = KEYS[q], KEYS[q + 1]
  for m, v in pairs(counts) do
    j = j + 1
    local a = 2 * j
    args[a - first], args[a - second] = m, count_texts[v] or count_text(v)
    if j == 1000 then
      redis.call(write, lifetime, unpack(args))
      redis.call(write, month, unpack(args))
      j = 0
    end
  end
  if j > 0 then
    redis.call(write, lifetime, unpack(args, 1, 2 * j))
    redis.call(write, month, unpack(args, 1, 2 * j))
  end
end
local function members(t)
  local ms, n = {}, 0
  for m in pairs(t) do
    n = n + 1
    ms[n] = m
  end
  return ms
end
for q, counts in pairs(zinc) do
  if bare[q] then
    write_new(q, counts, not hashes[q])
  else
    local read, write = 'ZMSCORE', 'ZADD'
    if hashes[q] then read, write = 'HMGET', 'HSET' end
    apply({KEYS[q], KEYS[q + 1]}, members(counts), counts, read, write)
  end
end
if next(box) then
  apply({KEYS[1]}, members(box), box, 'HMGET', 'HSET')
end
if mixed then users[#users + 1] = table.concat(places_at) end
return users
