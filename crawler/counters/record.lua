-- record.lua: check-mark-increment of one batch of a visit's peers, atomically.
--
-- KEYS[1]      outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- KEYS[2..15]  indexes  ZSET member -> count, each lifetime index ({ns}:ix:all:<scope>)
--                       followed by its month index ({ns}:ix:<YYYY-MM>:<scope>), scopes:
--                       torrents, countries, cities, postcodes, countries:t:H,
--                       cities:t:H, postcodes:t:H
-- KEYS[..]     per country (position given in ARGV[5]): torrents:c:C, cities:c:C,
--              postcodes:c:C, each lifetime then month
-- KEYS[n+1..]   marks    STRING of 12-byte records: 8-byte field, then the unix second
--                       of the mark as a big-endian u32 ({ns}:mk:<n>); all marks of one
--                       IP share one bucket; every bucket this batch reads, last
-- ARGV[1]      now      unix seconds (integer): the time stored in new marks
-- ARGV[2]      cutoff   now - window: a mark at or before it has expired
-- ARGV[3]      h        the info-hash, 40 lower-case hex
-- ARGV[4]      post     "cC" / "tT": which families go to the outbox (c = countries.*,
--                       t = torrents.*); "--" for none
-- ARGV[5]      countries binary, per country: u16 key position, str(escaped name)
-- ARGV[6]      places    binary, per place: u16 country number (1-based; 0 = unknown),
--                        str(escaped city), str(escaped postcode) (empty = unknown)
-- ARGV[7]      n         the number of keys before the mark buckets
-- ARGV[8]      ips       binary, per IP: u16 bucket number (1-based: KEYS[n + b]),
--                        u16 place number, u8 k; when k >= 3 the 8-byte field of the
--                        IP's group record for (torrent, place); then k 8-byte fields,
--                        one per metric of the place, in the order torrent; country,
--                        torrent-country; city, torrent-city; postcode,
--                        torrent-postcode (parts the place lacks are absent)
-- str = u16 length .. bytes; integers big endian.
--
-- Python sends places and fingerprints only; names are read, and metric names
-- and index members built, only when something counted, so a visit whose
-- peers were all seen costs one MGET of its buckets, a memmem per IP (its
-- group record; per (metric, IP) when that is missing or stale) and no write.
-- For each mark missing or expired: write it (one SET of the bucket per IP that
-- had any; SET, not APPEND, so the string is allocated at its exact size) and
-- count one.
-- Then add each metric's count to its indexes (lifetime and month) and, when its
-- family is posted, to the outbox. Returns the count of torrents.<h>.users.

local byte, sub, find, char = string.byte, string.sub, string.find, string.char
local now, cutoff, h, post = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local stamp = char(math.floor(now / 16777216) % 256, math.floor(now / 65536) % 256,
                   math.floor(now / 256) % 256, now % 256)

local function u16(s, i)
  local a, b = byte(s, i, i + 1)
  return a * 256 + b
end

-- the batch's buckets, read in one call
local nfixed = tonumber(ARGV[7])
local vals = redis.call('MGET', unpack(KEYS, nfixed + 1))

-- counts per place number: {[j] = count} for metric slot j (created when one counts)
local t_users, counted = 0, {}

-- The position of field f's record in bucket s, or nil: a match on a record
-- boundary (f's bytes may also occur across two records).
local function lookup(s, f)
  local x = find(s, f, 1, true)
  while x and x % 12 ~= 1 do
    x = find(s, f, x + 1, true)
  end
  return x
end
local function time_at(s, x)
  local a, b, c, d = byte(s, x + 8, x + 11)
  return ((a * 256 + b) * 256 + c) * 256 + d
end
local function u32(n)
  return char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
              math.floor(n / 256) % 256, n % 256)
end

local p, o = ARGV[8], 1
while o <= #p do
  local b, pno, k = u16(p, o), u16(p, o + 2), byte(p, o + 4)
  o = o + 5
  local s = vals[b] or ''
  -- the group record of (IP, torrent, place), for k >= 3: its time is the
  -- oldest of the IP's k marks for them, so while it is fresh all k are and
  -- nothing can count: the revisit of a known peer costs one lookup
  local gf, gx
  if k >= 3 then
    gf = sub(p, o, o + 7)
    o = o + 8
    gx = lookup(s, gf)
    if gx and time_at(s, gx) > cutoff then
      o = o + 8 * k
      k = 0
    end
  end
  local added, changed = nil, false
  local oldest = now
  local pc
  for j = 1, k do
    local f = sub(p, o, o + 7)
    o = o + 8
    local x = lookup(s, f)
    local fresh = false
    if not x then
      fresh = true
      added = added or {}
      added[#added + 1] = f .. stamp
    else
      local t = time_at(s, x)
      if t <= cutoff then
        fresh, changed = true, true
        s = sub(s, 1, x + 7) .. stamp .. sub(s, x + 12)
      elseif t < oldest then
        oldest = t
      end
    end
    if fresh then
      if j == 1 then
        t_users = t_users + 1
      else
        pc = pc or counted[pno]
        if not pc then
          pc = {0, 0, 0, 0, 0, 0, 0}
          counted[pno] = pc
        end
        pc[j] = pc[j] + 1
      end
    end
  end
  if gf and k > 0 then
    -- positions found above stay valid: renewals keep the length, additions go last
    if gx then
      s = sub(s, 1, gx + 7) .. u32(oldest) .. sub(s, gx + 12)
    else
      added = added or {}
      added[#added + 1] = gf .. u32(oldest)
    end
    changed = true
  end
  if added then
    s = s .. table.concat(added)
  end
  if changed or added then
    redis.call('SET', KEYS[nfixed + b], s)
    vals[b] = s
  end
end

if t_users == 0 and next(counted) == nil then
  return 0
end

-- names, read only now: countries {key position, name}; places {country, city, postcode}
local function str(s, i)
  local len = u16(s, i)
  return sub(s, i + 2, i + 1 + len), i + 2 + len
end
local countries, cs, i = {}, ARGV[5], 1
while i <= #cs do
  local pos = u16(cs, i)
  local name
  name, i = str(cs, i + 2)
  countries[#countries + 1] = {pos, name}
end
local places, ps = {}, ARGV[6]
i = 1
while i <= #ps do
  local c = u16(ps, i)
  local y, z
  y, i = str(ps, i + 2)
  z, i = str(ps, i)
  places[#places + 1] = {c, y, z}
end

-- aggregate per country and per (country, city|postcode name)
local cc, tc = {}, {}  -- country number -> count
local cy, ty, cp, tp = {}, {}, {}, {}  -- country number -> {name -> count}
local function add2(t, c, name, n)
  if n > 0 then
    local m = t[c]
    if not m then m = {}; t[c] = m end
    m[name] = (m[name] or 0) + n
  end
end
for pno, pc in pairs(counted) do
  local c, y, z = places[pno][1], places[pno][2], places[pno][3]
  cc[c] = (cc[c] or 0) + pc[2]
  tc[c] = (tc[c] or 0) + pc[3]
  local j = 4
  if y ~= '' then
    add2(cy, c, y, pc[4])
    add2(ty, c, y, pc[5])
    j = 6
  end
  if z ~= '' then
    add2(cp, c, z, pc[j])
    add2(tp, c, z, pc[j + 1])
  end
end

local post_c, post_t = sub(post, 1, 1) == 'c', sub(post, 2, 2) == 't'
local function incr(pos, n, member)
  redis.call('ZINCRBY', KEYS[pos], n, member)
  redis.call('ZINCRBY', KEYS[pos + 1], n, member)
end
local function out(on, stat, n)
  if on then redis.call('HINCRBY', KEYS[1], stat, n) end
end

local th = 'torrents.' .. h
if t_users > 0 then
  incr(2, t_users, h)
  out(post_t, th .. '.users', t_users)
end
for c, n in pairs(cc) do
  if n > 0 then
    local name = countries[c][2]
    incr(4, n, name)
    out(post_c, 'countries.' .. name .. '.users', n)
  end
end
for c, n in pairs(tc) do
  if n > 0 then
    local pos, name = countries[c][1], countries[c][2]
    incr(10, n, name)
    incr(pos, n, h)
    out(post_t, th .. '.countries.' .. name .. '.users', n)
  end
end
-- cities (index 6, torrent 12, per country +2) and postcodes (8, 14, +4)
local function places_of(g, t, gpos, tpos, cpos, family)
  for c, names in pairs(g) do
    local country = countries[c]
    for name, n in pairs(names) do
      incr(gpos, n, country[2] .. '.' .. name)
      incr(country[1] + cpos, n, name)
      out(post_c, 'countries.' .. country[2] .. '.' .. family .. '.' .. name .. '.users', n)
    end
  end
  for c, names in pairs(t) do
    local country = countries[c]
    for name, n in pairs(names) do
      incr(tpos, n, country[2] .. '.' .. name)
      out(post_t, th .. '.countries.' .. country[2] .. '.' .. family .. '.' .. name .. '.users', n)
    end
  end
end
places_of(cy, ty, 6, 12, 2, 'cities')
places_of(cp, tp, 8, 14, 4, 'postcodes')
return t_users
