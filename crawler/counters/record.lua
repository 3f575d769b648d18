-- record.lua: check-mark-increment of a batch of (metric, IP) pairs, atomically.
--
-- KEYS[1]      outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- KEYS[2..]    indexes  ZSET member -> count: each lifetime index
--                       ({ns}:ix:all:<scope>) is followed by its month index
--                       ({ns}:ix:<YYYY-MM>:<scope>)
--              marks    HASH 8-byte field -> unix second of the mark ({ns}:mk:<n>);
--                       all marks of one IP share one bucket
--              (index and mark keys are addressed by position from ARGV)
-- ARGV[1]      now      unix seconds (integer): the time stored in new marks
-- ARGV[2]      cutoff   now - window: a mark at or before it has expired
-- ARGV[3]      metrics  binary table, per metric: str(outbox stat name, "" when
--                       not posted), u8 n, then n times: u16 position of its
--                       lifetime index key, str(member); str = u16 length .. bytes
-- ARGV[4]      ips      binary, per IP: u16 mark key position, u8 k, then k
--                       times: 8-byte field .. u16 metric number (1-based);
--                       big endian
--
-- Packing the table and the pairs into two strings keeps the client's work
-- per call small (one argument per key, not several per pair).
-- One HMGET per IP reads all its marks; one HSET writes its new ones.
-- For each pair whose mark is missing or expired: write the mark and count one
-- for its metric. Then, per metric, add its count to every index it lives in
-- (lifetime and month) and to the outbox. Returns the counts, one per metric.

local byte, sub = string.byte, string.sub
local now, cutoff = ARGV[1], tonumber(ARGV[2])

local function u16(s, i)
  local a, b = byte(s, i, i + 1)
  return a * 256 + b
end

local t, metrics, i = ARGV[3], {}, 1
while i <= #t do
  local len = u16(t, i)
  local out = sub(t, i + 2, i + 1 + len)
  i = i + 2 + len
  local n = byte(t, i)
  i = i + 1
  local idx = {}
  for j = 1, n do
    local pos = u16(t, i)
    len = u16(t, i + 2)
    idx[j] = {pos, sub(t, i + 4, i + 3 + len)}
    i = i + 4 + len
  end
  metrics[#metrics + 1] = {out, idx}
end

local counts = {}
for k = 1, #metrics do counts[k] = 0 end

local p, o = ARGV[4], 1
while o <= #p do
  local key = KEYS[u16(p, o)]
  local k = byte(p, o + 2)
  o = o + 3
  local fields, nums = {}, {}
  for j = 1, k do
    fields[j] = sub(p, o, o + 7)
    nums[j] = u16(p, o + 8)
    o = o + 10
  end
  local seen = redis.call('HMGET', key, unpack(fields))
  local fresh = {}
  for j = 1, k do
    local s = seen[j]
    if (not s) or tonumber(s) <= cutoff then
      fresh[#fresh + 1] = fields[j]
      fresh[#fresh + 1] = now
      counts[nums[j]] = counts[nums[j]] + 1
    end
  end
  if #fresh > 0 then
    redis.call('HSET', key, unpack(fresh))
  end
end

for k = 1, #metrics do
  local c = counts[k]
  if c > 0 then
    local out, idx = metrics[k][1], metrics[k][2]
    for j = 1, #idx do
      redis.call('ZINCRBY', KEYS[idx[j][1]], c, idx[j][2])
      redis.call('ZINCRBY', KEYS[idx[j][1] + 1], c, idx[j][2])
    end
    if out ~= '' then
      redis.call('HINCRBY', KEYS[1], out, c)
    end
  end
end
return counts
