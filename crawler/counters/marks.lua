-- marks.lua: reading and writing dedupe marks. Included by the scripts that check and write dedupe marks
-- (``--! include marks`` in record.lua and places.lua; crawler.store.scripts.source
-- inlines it; probe.lua reads with it). A mark bucket is a STRING of 12-byte records: an 8-byte field,
-- then the unix second of the mark as a big-endian u32
-- (crawler/counters/marks.py). A mark counts as present while its time is
-- after the cutoff (now - window).
--
-- A script reads its buckets once (read_buckets), checks each mark against
-- those values (check_mark: a renewed mark is rewritten in vals, a new one
-- joins the bucket's string of new records in adds, so a bucket is copied
-- once per script, not per record), and writes every changed bucket back
-- with MSET at the end (write_buckets), so a string is allocated at its exact
-- size and nothing is written before every input was checked. New records
-- wait as one string per bucket rather than a table of pieces: most buckets
-- of a call get one or two, and a table for each cost more than the rest of
-- the bucket's work (a first visit's scripts in Redis took 0.8 of the
-- time). The appends stay short while a bucket gets few records a call: at
-- 256 buckets a shard or more (2^18 over at most 1,024 shards) a call's
-- 4,800 pairs put a handful in each. A single bucket, a test's setting, gets
-- them all: 400 IPs a visit then take twice the time they did as tables.

-- a u32 as 4 big-endian bytes
local function u32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end

-- The values of KEYS[first..] (MGET in slices: unpack() of more than ~8,000
-- values overflows Lua's stack), numbered from 1; a missing bucket is ''.
local function read_buckets(first)
  local vals = {}
  for i = first, #KEYS, 1000 do
    local last = math.min(i + 999, #KEYS)
    local got = redis.call('MGET', unpack(KEYS, i, last))
    for j = i, last do
      vals[j - first + 1] = got[j - i + 1] or ''
    end
  end
  return vals
end

-- The position of field f's record in bucket string s, or nil. A match must
-- start on a record boundary (f's bytes may also occur across two records).
local find = string.find
local function find_record(s, f)
  if s == '' then return nil end
  local x = find(s, f, 1, true)
  while x and x % 12 ~= 1 do
    x = find(s, f, x + 1, true)
  end
  return x
end

-- A new record (f, stamp) for bucket b, written by write_buckets.
local function add_record(adds, b, f, stamp)
  local a = adds[b]
  if not a then
    adds[b] = f .. stamp
  else
    adds[b] = a .. f .. stamp
  end
end

-- Check the mark of field f in bucket b: nil when it was missing or expired
-- (it is now written at stamp: it counts), else its time (fresh: it does not).
-- The hottest function of record.lua (a first visit checks ~7 marks per IP):
-- find_record and add_record are written out here, a Lua call costing about
-- as much as the work of either.
local function check_mark(vals, dirty, adds, b, f, stamp, cutoff)
  local s = vals[b]
  local x
  if s ~= '' then
    x = find(s, f, 1, true)
    while x and x % 12 ~= 1 do
      x = find(s, f, x + 1, true)
    end
  end
  if not x then
    local a = adds[b]
    if not a then
      adds[b] = f .. stamp
    else
      adds[b] = a .. f .. stamp
    end
    return nil
  end
  local c1, c2, c3, c4 = string.byte(s, x + 8, x + 11)
  local t = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
  if t <= cutoff then
    vals[b] = string.sub(s, 1, x + 7) .. stamp .. string.sub(s, x + 12)
    dirty[b] = true
    return nil
  end
  return t
end

-- Set the record of field f in bucket b to time stamp (written or replaced).
local function set_mark(vals, dirty, adds, b, f, stamp)
  local s = vals[b]
  local x = find_record(s, f)
  if x then
    vals[b] = string.sub(s, 1, x + 7) .. stamp .. string.sub(s, x + 12)
    dirty[b] = true
  else
    add_record(adds, b, f, stamp)
  end
end

-- A torrent's marks live in its roster (crawler/counters/marks.py), as wide as
-- the visit that made them was large: each width a torrent's marks were made
-- at has a record in the roster's first bucket, its field the torrent's 7-byte
-- width base then the width's code (0-6: 4^code buckets), its time that of the
-- last mark made at that width. The codes whose record is fresh, as a bit mask:
-- where the torrent's marks of the window may be. One search of the base finds them all.
local function live_widths(s, base, cutoff)
  local mask = 0
  local x = find(s, base, 1, true)
  while x do
    if x % 12 == 1 then
      local c, c1, c2, c3, c4 = string.byte(s, x + 7, x + 11)
      if c <= 6 and ((c1 * 256 + c2) * 256 + c3) * 256 + c4 > cutoff then mask = bit.bor(mask, 2 ^ c) end
    end
    x = find(s, base, x + 1, true)
  end
  return mask
end

-- check_mark of a torrent mark that may also be kept at other widths of the
-- roster (or by (IP, torrent), where a crawl kept them before rosters): the
-- buckets ex. Fresh in any of them, it is present (its time); else it is
-- written (or renewed) in bucket b, the visit's width.
local function check_wide(vals, dirty, adds, b, ex, f, stamp, cutoff)
  for i = 0, #ex do
    local s = vals[i == 0 and b or ex[i]]
    local x = find_record(s, f)
    if x then
      local c1, c2, c3, c4 = string.byte(s, x + 8, x + 11)
      local t = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
      if t > cutoff then return t end
    end
  end
  return check_mark(vals, dirty, adds, b, f, stamp, cutoff)
end

-- MSET every bucket changed or added to (bucket b is KEYS[first + b - 1]), in
-- slices of 1,000 values (an even count: a key never leaves its value).
local function write_buckets(first, vals, dirty, adds)
  local kv, n = {}, 0
  for b in pairs(adds) do
    dirty[b] = true
  end
  for b in pairs(dirty) do
    kv[n + 1] = KEYS[first + b - 1]
    local a = adds[b]
    if a then
      kv[n + 2] = vals[b] .. a
    else
      kv[n + 2] = vals[b]
    end
    n = n + 2
  end
  for i = 1, n, 1000 do
    redis.call('MSET', unpack(kv, i, math.min(i + 999, n)))
  end
end
