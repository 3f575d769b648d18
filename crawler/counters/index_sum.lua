-- index_sum.lua: the sum of every count in one sorted-set index, read-only.
--
-- KEYS[1]  index  ZSET member -> count ({ns}:ix:<period>:<scope>, or a shard's totals)
--
-- Returns the sum as a decimal string (exact: counts are integers below 2^53).
-- `stats cities --country C` and the dashboard's country page subtract it from
-- the country's own count to show the peers of C that no city holds. Read in
-- slices of 1,000 members: one round trip whatever the index's size, and no
-- reply of every member to the client.

local total, i = 0, 0
while true do
  local got = redis.call('ZRANGE', KEYS[1], i, i + 999, 'WITHSCORES')
  for j = 2, #got, 2 do
    total = total + tonumber(got[j])
  end
  if #got < 2000 then
    break
  end
  i = i + 1000
end
return string.format('%.0f', total)
