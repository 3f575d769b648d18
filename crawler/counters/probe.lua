-- probe.lua: which of a visit's peers might count; a visit's swarm record.
--
-- KEYS[1]     torrents ZSET the lifetime torrents index ({ns}:ix:all:torrents)
-- KEYS[2..]   marks   STRING of 12-byte records ({ns}:mk:<n>, see record.lua): the
--                     buckets of the torrent's roster this call reads
-- ARGV[1]     cutoff  now - window: a record at or before it has expired
-- ARGV[2]     h       the info-hash, 40 lower-case hex
-- ARGV[3]     probes  binary, per IP: u16 bucket (1-based: KEYS[1 + b]), then the
--                     8-byte field of the IP's group record for (torrent, place)
--                     (its torrents.<h>.users mark when the IP has no country)
-- ARGV[4]     swarm   optional (empty: none), binary: u16 bucket, then the 8-byte field
--                     of the visit's swarm record (crawler/counters/swarm_record.py)
-- ARGV[5]     widths  optional, binary: u16 the torrent's first roster bucket (1-based),
--                     then its 7-byte width base (marks.lua's live_widths)
--
-- Returns one byte per IP: "1" if its record is missing or expired (record.lua
-- must look at the IP's marks), "0" if it is fresh: every mark it stands for
-- is then fresh at this visit's time, so nothing of that IP can count, and
-- no later write can change that (marks are only renewed once expired).
-- A revisit whose peers are all known costs this call alone. A torrent never
-- counted has no records at all: then every IP is "1" without reading a bucket.
--
-- With a swarm record, it is looked up first: fresh, the call answers "S" alone
-- (nothing of the visit can count) and reads no other bucket. Else, without
-- probes, it answers ""; with them, when every IP is "0", the record is written
-- (unless fresh already) with the oldest of the IPs' record times: the one
-- write of this script. With widths, an answer of flags ends with one byte more:
-- the codes of the widths the torrent's marks were made at within the window,
-- which record.lua must look at (0 when every IP is "0": nothing is recorded).
--! include marks  (u32, read_buckets, find_record, check_mark, write_buckets, live_widths)

local byte, sub, find = string.byte, string.sub, string.find
local cutoff, h, p, swarm, wa = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local nb = #KEYS - 1
if swarm == '' then swarm = nil end
-- an argument of a u16 bucket number (1-based: KEYS[1 + b]) then n bytes: the number and the bytes, or nil
local function bucket_and(arg, n)
  local b = #arg == 2 + n and byte(arg, 1) * 256 + byte(arg, 2)
  if b and b >= 1 and b <= nb then return b, sub(arg, 3, 2 + n) end
end
local b0, base
if wa then
  b0, base = bucket_and(wa, 7)
  if not b0 then return redis.error_reply('probe.lua: malformed widths') end
end
local sb, sf
if swarm then
  sb, sf = bucket_and(swarm, 8)
  if not sb then return redis.error_reply('probe.lua: malformed swarm record') end
end
if #p % 10 ~= 0 then
  return redis.error_reply('probe.lua: probes of ' .. #p .. ' bytes are not whole 10-byte records')
end
if not redis.call('ZSCORE', KEYS[1], h) then
  return string.rep('1', #p / 10) .. (wa and string.char(0) or '')
end
if swarm then
  local s = redis.call('GET', KEYS[1 + sb]) or ''
  local x = find_record(s, sf)
  if x then
    local c1, c2, c3, c4 = byte(s, x + 8, x + 11)
    if ((c1 * 256 + c2) * 256 + c3) * 256 + c4 > cutoff then
      return 'S'
    end
  end
end
if #p == 0 then
  return ''
end
local got = read_buckets(2)
-- A revisit's whole cost is this loop: the record search (marks.lua's
-- find_record) and the time's decoding are written out in it (a Lua call
-- costs about as much as either's work).
local out, n = {}, 0
local oldest, stale = nil, false  -- the oldest fresh record's time; whether any IP is "1"
for o = 1, #p, 10 do
  local a, b = byte(p, o, o + 1)
  local bn = a * 256 + b
  if bn > nb then
    return redis.error_reply('probe.lua: bucket number out of range at byte ' .. o)
  end
  local s = got[bn]
  local flag = '1'
  if s and s ~= '' then
    local f = sub(p, o + 2, o + 9)
    local x = find(s, f, 1, true)
    while x and x % 12 ~= 1 do
      x = find(s, f, x + 1, true)
    end
    if x then
      local c1, c2, c3, c4 = byte(s, x + 8, x + 11)
      local t = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
      if t > cutoff then
        flag = '0'
        if not oldest or t < oldest then oldest = t end
      end
    end
  end
  if flag == '1' then stale = true end
  n = n + 1
  out[n] = flag
end
if swarm and not stale then
  local dirty, adds = {}, {}
  check_mark(got, dirty, adds, sb, sf, u32(oldest), cutoff)
  write_buckets(2, got, dirty, adds)
end
if wa then
  n = n + 1
  out[n] = string.char(stale and live_widths(got[b0] or '', base, cutoff) or 0)
end
return table.concat(out)
