-- places.lua: check-mark-count of a batch of IPs' place metrics in their own shard,
-- atomically (crawls of several shards).
--
-- KEYS[1]     outbox   HASH stat name -> pending StatHat count ({tag}:sh:outbox)
-- KEYS[2]     rollup   HASH rollup outbox ({tag}:rx:outbox): u16 length ..
--                      <YYYY-MM>:<scope> .. member -> count not yet in the month's
--                      and the lifetime totals (counters/rollup.py)
-- KEYS[3..]   marks    STRING of 12-byte records ({tag}:mk:<n>, see record.lua): the
--                      buckets of the IPs (chosen by the IP alone)
-- ARGV[1]     now      unix seconds (integer): the time stored in new marks
-- ARGV[2]     cutoff   now - window: a mark at or before it has expired
-- ARGV[3]     post     "c" when the countries family goes to the outbox, else "-"
-- ARGV[4]     month    YYYY-MM of now (UTC)
-- ARGV[5]     countries binary, per country: str(escaped name)
-- ARGV[6]     places    binary, per place: u16 country number (1-based), str(escaped
--                       city), str(escaped postcode) (empty = unknown)
-- ARGV[7]     ips       binary, per IP: u16 bucket (1-based: KEYS[2 + b]), u16 place
--                       number, u8 m, then m 8-byte fields: country, city, postcode
--                       (the parts the place has)
-- str = u16 length .. bytes; integers big endian.
--
-- Every mark missing or expired is written (now) and counts one; the counts go
-- to the rollup outbox (and, when posted, the StatHat outbox). Nothing is read
-- after the first write, and a malformed call writes nothing. Returns, per IP,
-- the oldest time of its m marks as a u32: record.lua's torrent part makes the
-- IP's group record no younger, so a fresh group record still means every one
-- of the IP's marks is fresh.

--! include marks  (u32, read_buckets, check_mark, set_mark, write_buckets)
--! include places_arg  (u16, str, read_places)
--! include counts  (count_text)

local byte, sub, char = string.byte, string.sub, string.char
local now, cutoff, post, month = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
if not now or not cutoff or not month or not month:match('^%d%d%d%d%-%d%d$') then
  return redis.error_reply('places.lua: bad time, cutoff or month')
end
local stamp = u32(now)

local countries, cs, i = {}, ARGV[5], 1
while i <= #cs do
  local name
  name, i = str(cs, i)
  if not name then
    return redis.error_reply('places.lua: malformed country at byte ' .. i)
  end
  countries[#countries + 1] = name
end
local places, bad = read_places(ARGV[6], 1, #countries)
if not places then
  return redis.error_reply('places.lua: malformed place at byte ' .. bad)
end

local nb = #KEYS - 2
local vals = read_buckets(3)

local p, o = ARGV[7], 1
-- check every record before the first write
while o <= #p do
  local b, pno, m = u16(p, o), u16(p, o + 2), byte(p, o + 4)
  if not m or b < 1 or b > nb or pno < 1 or pno > #places or m ~= places[pno][4]
      or o + 4 + 8 * m > #p then
    return redis.error_reply('places.lua: malformed peer record at byte ' .. o)
  end
  o = o + 5 + 8 * m
end

local dirty, adds, counted, out = {}, {}, {}, {}
o = 1
while o <= #p do
  local b, pno, m = u16(p, o), u16(p, o + 2), byte(p, o + 4)
  o = o + 5
  local oldest = now
  local pc = counted[pno]
  for j = 1, m do
    local t = check_mark(vals, dirty, adds, b, sub(p, o, o + 7), stamp, cutoff)
    o = o + 8
    if t then
      if t < oldest then oldest = t end
    else
      if not pc then
        pc = {0, 0, 0}
        counted[pno] = pc
      end
      pc[j] = pc[j] + 1
    end
  end
  out[#out + 1] = u32(oldest)
end
write_buckets(3, vals, dirty, adds)

-- counts per rollup field and StatHat name, then one read and one write per hash
local rx, box = {}, {}
local function field(scope, member, n)
  local t = month .. ':' .. scope
  local k = char(math.floor(#t / 256) % 256, #t % 256) .. t .. member
  rx[k] = (rx[k] or 0) + n
end
local post_c = post == 'c'
-- The country of the IPs no country holds (crawler.counters.names.UNPLACED_MEMBER): counted, never posted.
local UNPLACED = '%unplaced'
local families = {'cities', 'postcodes'}
for pno, pc in pairs(counted) do
  local pl = places[pno]
  local cname = countries[pl[1]]
  if pc[1] > 0 then
    field('countries', cname, pc[1])
    if post_c and cname ~= UNPLACED then
      local stat = 'countries.' .. cname .. '.users'
      box[stat] = (box[stat] or 0) + pc[1]
    end
  end
  local j = 2
  for f = 1, 2 do
    local name = pl[f + 1]
    if name ~= '' then
      local n = pc[j]
      if n > 0 then
        field(families[f] .. ':c:' .. cname, name, n)
        if post_c then
          local stat = 'countries.' .. cname .. '.' .. families[f] .. '.' .. name .. '.users'
          box[stat] = (box[stat] or 0) + n
        end
      end
      j = j + 1
    end
  end
end
local function add(key, t)
  local ms = {}
  for m in pairs(t) do
    ms[#ms + 1] = m
  end
  for first = 1, #ms, 1000 do
    local part = {unpack(ms, first, math.min(first + 999, #ms))}
    local old = redis.call('HMGET', key, unpack(part))
    local args = {}
    for j = 1, #part do
      args[#args + 1] = part[j]
      args[#args + 1] = count_text((tonumber(old[j]) or 0) + t[part[j]])
    end
    redis.call('HSET', key, unpack(args))
  end
end
if next(rx) then add(KEYS[2], rx) end
if next(box) then add(KEYS[1], box) end
return table.concat(out)
