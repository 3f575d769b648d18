-- sweep.lua: drop expired dedupe marks from some mark buckets.
--
-- KEYS[1..n]  marks   HASH field -> unix second of the mark ({ns}:mk:<n>)
-- ARGV[1]     cutoff  a mark at or before this unix second has expired
--
-- Correctness never depends on this sweep (record.lua compares times); it
-- only gives stale fields' memory back, since Redis 7.0 has no per-field
-- TTL. Callers pass a bounded number of buckets of ~100 fields each, so one
-- call holds Redis for well under a few milliseconds. Returns fields removed.

local cutoff = tonumber(ARGV[1])
local removed = 0
for i = 1, #KEYS do
  local flat = redis.call('HGETALL', KEYS[i])
  local stale = {}
  for j = 1, #flat, 2 do
    if tonumber(flat[j + 1]) <= cutoff then
      stale[#stale + 1] = flat[j]
    end
  end
  -- HDEL in slices: unpack() of a huge list would overflow Lua's stack.
  for j = 1, #stale, 1000 do
    removed = removed + redis.call('HDEL', KEYS[i], unpack(stale, j, math.min(j + 999, #stale)))
  end
end
return removed
