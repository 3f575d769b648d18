-- record.lua: check-mark-increment of a batch of (metric, IP) pairs, atomically.
--
-- KEYS[1]        outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- KEYS[2..]      indexes  ZSET member -> count ({ns}:ix:<period>:<family>...)
--                marks    HASH field -> unix second of the mark ({ns}:mk:<n>)
--                (index and mark keys are addressed by position from ARGV)
-- ARGV[1]        now      unix seconds (integer): the time stored in new marks
-- ARGV[2]        cutoff   now - window: a mark at or before it has expired
-- ARGV[3]        M        number of metrics in this batch
-- then M times:  outbox name ("" when the metric is not posted to StatHat),
--                n, then n times: index key position, member
-- then pairs:    one ARGV each: 8-byte field .. 2-byte mark key position
--                .. 2-byte metric number (1-based, big endian)
--
-- For each pair whose mark is missing or expired: write the mark and count
-- one for its metric. Then, per metric, add its count to every index it
-- lives in (lifetime and month) and to the outbox. Returns the M counts.

local now, cutoff = ARGV[1], tonumber(ARGV[2])
local m = tonumber(ARGV[3])
local metrics, a = {}, 4
for i = 1, m do
  local out, n = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  local idx = {}
  for j = 1, n do
    idx[j] = {tonumber(ARGV[a]), ARGV[a + 1]}
    a = a + 2
  end
  metrics[i] = {out, idx}
end

local counts = {}
for i = 1, m do counts[i] = 0 end

local byte, sub = string.byte, string.sub
for p = a, #ARGV do
  local s = ARGV[p]
  local field = sub(s, 1, 8)
  local b1, b2, m1, m2 = byte(s, 9, 12)
  local key = KEYS[b1 * 256 + b2]
  local seen = redis.call('HGET', key, field)
  if (not seen) or tonumber(seen) <= cutoff then
    redis.call('HSET', key, field, now)
    local k = m1 * 256 + m2
    counts[k] = counts[k] + 1
  end
end

for i = 1, m do
  local c = counts[i]
  if c > 0 then
    local out, idx = metrics[i][1], metrics[i][2]
    for j = 1, #idx do
      redis.call('ZINCRBY', KEYS[idx[j][1]], c, idx[j][2])
    end
    if out ~= '' then
      redis.call('HINCRBY', KEYS[1], out, c)
    end
  end
end
return counts
