-- swarm_check.lua: which visits of a batch their swarm records settle.
--
-- Asked for before any of the visits' IPs is met, one call a batch and counter shard
-- (crawler/counters/swarm_record.py).
--
-- KEYS[1]     torrents ZSET the lifetime torrents index ({ns}:ix:all:torrents)
-- KEYS[2..]   marks    STRING of 12-byte records ({ns}:mk:<n>, see record.lua): the buckets
--                      holding the visits' records
-- ARGV[1]     cutoff   now - window: a record at or before it has expired
-- ARGV[2]     records  binary, per visit: its info-hash (40 lower-case hex), u16 bucket
--                      (1-based: KEYS[1 + b]), the 8-byte field of its swarm record
--
-- Returns one byte per visit, in order: "S" when its torrent is counted here and its record
-- fresh (nothing of the visit can count: what probe.lua answers for the same record), else
-- "-". Reads only.
--! include marks  (read_buckets, find_record)

local byte, sub = string.byte, string.sub
local cutoff, recs = tonumber(ARGV[1]), ARGV[2] or ''
local nb = #KEYS - 1
if not cutoff then
  return redis.error_reply('swarm_check.lua: bad cutoff ' .. tostring(ARGV[1]))
end
if #recs % 50 ~= 0 then
  return redis.error_reply('swarm_check.lua: records of ' .. #recs .. ' bytes are not whole 50-byte records')
end
local n = #recs / 50
if n == 0 then
  return ''
end
local hs, bs = {}, {}
for v = 1, n do
  local o = 50 * v - 49
  local h = sub(recs, o, o + 39)
  local b1, b2 = byte(recs, o + 40, o + 41)
  local b = b1 * 256 + b2
  if not string.match(h, '^[0-9a-f]+$') or b < 1 or b > nb then
    return redis.error_reply('swarm_check.lua: malformed record at byte ' .. o)
  end
  hs[v], bs[v] = h, b
end
local counted = redis.call('ZMSCORE', KEYS[1], unpack(hs))
local vals = read_buckets(2)
local out = {}
for v = 1, n do
  local flag = '-'
  local s = vals[bs[v]]
  if counted[v] and s ~= '' then
    local o = 50 * v - 49
    local x = find_record(s, sub(recs, o + 42, o + 49))
    if x then
      local c1, c2, c3, c4 = byte(s, x + 8, x + 11)
      if ((c1 * 256 + c2) * 256 + c3) * 256 + c4 > cutoff then
        flag = 'S'
      end
    end
  end
  out[v] = flag
end
return table.concat(out)
