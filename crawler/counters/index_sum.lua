-- index_sum.lua: the sum of the counts of one slice of a sorted-set index, read-only.
--
-- KEYS[1]  index  ZSET member -> count ({ns}:ix:<period>:<scope>, or a shard's totals)
-- ARGV[1]  start  the slice's first rank (0-based)
-- ARGV[2]  n      how many members, at most
--
-- Returns the slice's sum as a decimal string (exact: counts are integers below
-- 2^53). `stats cities --country C` and the dashboard's country page subtract
-- the index's sum from the country's own count, for the peers of C that no
-- city holds. The caller pipelines one call per slice: only a number comes
-- back, not every member, and no call holds Redis for long (a slice of
-- 2,000 members ~1 ms, where one call over 20,000 held it ~16 ms).

local start, n = tonumber(ARGV[1]), tonumber(ARGV[2])
if not start or not n or start < 0 or n < 1 then
  return redis.error_reply('index_sum.lua: bad slice ' .. tostring(ARGV[1]) .. ' ' .. tostring(ARGV[2]))
end
local got = redis.call('ZRANGE', KEYS[1], start, start + n - 1, 'WITHSCORES')
local total = 0
for j = 2, #got, 2 do
  total = total + tonumber(got[j])
end
return string.format('%.0f', total)
