-- record.lua: check-mark-increment of one batch of a visit's peers, atomically.
--
-- KEYS[1]      outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- KEYS[2..15]  indexes  ZSET member -> count, each lifetime index ({ns}:ix:all:<scope>)
--                       followed by its month index ({ns}:ix:<YYYY-MM>:<scope>), scopes:
--                       torrents, countries, cities, postcodes, countries:t:H,
--                       cities:t:H, postcodes:t:H
-- KEYS[..]     per country (position given in ARGV[5]): torrents:c:C, cities:c:C,
--              postcodes:c:C, each lifetime then month
-- KEYS[..]     marks    HASH 8-byte field -> unix second of the mark ({ns}:mk:<n>);
--                       all marks of one IP share one bucket (position given in ARGV[9])
-- ARGV[1]      now      unix seconds (integer): the time stored in new marks
-- ARGV[2]      cutoff   now - window: a mark at or before it has expired
-- ARGV[3]      h        the info-hash, 40 lower-case hex
-- ARGV[4]      post     "cC" / "tT": which families go to the outbox (c = countries.*,
--                       t = torrents.*); "--" for none
-- ARGV[5]      countries binary, per country: u16 key position, str(escaped name)
-- ARGV[6]      cities    binary, per city: u16 country number, str(escaped name)
-- ARGV[7]      postcodes binary, per postcode: u16 country number, str(escaped name)
-- ARGV[8]      places    binary, per place: u16 country, u16 city, u16 postcode
--                        numbers (1-based; 0 = unknown)
-- ARGV[9]      ips       binary, per IP: u16 mark key position, u16 place number, then
--                        one 8-byte field per metric of the place, in the order
--                        torrent; country, torrent-country; city, torrent-city;
--                        postcode, torrent-postcode (parts the place lacks are absent)
-- str = u16 length .. bytes; integers big endian.
--
-- Python sends places and fingerprints only; the metric names and index members
-- are built here, and only for metrics that counted, so a visit whose peers
-- were all seen costs one HMGET per IP and nothing else.
-- For each mark missing or expired: write it (one HSET per IP) and count one.
-- Then add each metric's count to its indexes (lifetime and month) and, when its
-- family is posted, to the outbox. Returns the count of torrents.<h>.users.

local byte, sub = string.byte, string.sub
local now, cutoff, h, post = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local post_c, post_t = sub(post, 1, 1) == 'c', sub(post, 2, 2) == 't'

local function u16(s, i)
  local a, b = byte(s, i, i + 1)
  return a * 256 + b
end

-- names: {key position or country number, name}
local function read_names(s)
  local out, i = {}, 1
  while i <= #s do
    local n, len = u16(s, i), u16(s, i + 2)
    out[#out + 1] = {n, sub(s, i + 4, i + 3 + len)}
    i = i + 4 + len
  end
  return out
end

local countries, cities, postcodes = read_names(ARGV[5]), read_names(ARGV[6]), read_names(ARGV[7])
local places, pl = {}, ARGV[8]
for i = 1, #pl, 6 do
  places[#places + 1] = {u16(pl, i), u16(pl, i + 2), u16(pl, i + 4)}
end

-- counts: [1] torrent users; per country {global, torrent}; per city/postcode the same
local t_users = 0
local cc, tc, cy, ty, cp, tp = {}, {}, {}, {}, {}, {}
for i = 1, #countries do cc[i], tc[i] = 0, 0 end
for i = 1, #cities do cy[i], ty[i] = 0, 0 end
for i = 1, #postcodes do cp[i], tp[i] = 0, 0 end

local p, o = ARGV[9], 1
while o <= #p do
  local key = KEYS[u16(p, o)]
  local place = places[u16(p, o + 2)]
  local c, y, z = place[1], place[2], place[3]
  local k = 1
  if c > 0 then k = 3 end
  if y > 0 then k = k + 2 end
  if z > 0 then k = k + 2 end
  o = o + 4
  local fields = {}
  for j = 1, k do
    fields[j] = sub(p, o, o + 7)
    o = o + 8
  end
  local seen = redis.call('HMGET', key, unpack(fields))
  local fresh = {}
  for j = 1, k do
    local s = seen[j]
    if (not s) or tonumber(s) <= cutoff then
      fresh[#fresh + 1] = fields[j]
      fresh[#fresh + 1] = now
      -- j is the metric's slot in the order of the header
      if j == 1 then t_users = t_users + 1
      elseif j == 2 then cc[c] = cc[c] + 1
      elseif j == 3 then tc[c] = tc[c] + 1
      elseif y > 0 and j == 4 then cy[y] = cy[y] + 1
      elseif y > 0 and j == 5 then ty[y] = ty[y] + 1
      elseif j == k - 1 then cp[z] = cp[z] + 1
      else tp[z] = tp[z] + 1 end
    end
  end
  if #fresh > 0 then
    redis.call('HSET', key, unpack(fresh))
  end
end

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
for i = 1, #countries do
  local name = countries[i][2]
  if cc[i] > 0 then
    incr(4, cc[i], name)
    out(post_c, 'countries.' .. name .. '.users', cc[i])
  end
  if tc[i] > 0 then
    incr(10, tc[i], name)
    incr(countries[i][1], tc[i], h)
    out(post_t, th .. '.countries.' .. name .. '.users', tc[i])
  end
end
-- cities (index 6, torrent 12, per country +2) and postcodes (8, 14, +4)
local function places_of(names, g, t, gpos, tpos, cpos, family)
  for i = 1, #names do
    if g[i] > 0 or t[i] > 0 then
      local country = countries[names[i][1]][2]
      local name = names[i][2]
      local both = country .. '.' .. name
      if g[i] > 0 then
        incr(gpos, g[i], both)
        incr(countries[names[i][1]][1] + cpos, g[i], name)
        out(post_c, 'countries.' .. country .. '.' .. family .. '.' .. name .. '.users', g[i])
      end
      if t[i] > 0 then
        incr(tpos, t[i], both)
        out(post_t, th .. '.countries.' .. country .. '.' .. family .. '.' .. name .. '.users', t[i])
      end
    end
  end
end
places_of(cities, cy, ty, 6, 12, 2, 'cities')
places_of(postcodes, cp, tp, 8, 14, 4, 'postcodes')
return t_users
