-- top.lua: the first k members of one sorted-set index in the order of `stats`, read-only.
--
-- KEYS[1]  index  ZSET member -> count (a shard's totals, {tag}:tx:<period>:<scope>)
-- ARGV[1]  k      how many
--
-- Returns {member1, count1, ...}: count descending, equal counts by member
-- ascending (ZREVRANGE orders them backwards; the members holding the k-th
-- count are taken again with ZRANGEBYSCORE, which orders them by member).
-- One call per shard instead of two round trips: stats merges the shards'
-- answers, which is exact because each name lives in one shard.

local k = tonumber(ARGV[1])
if not k or k < 1 then
  return redis.error_reply('top.lua: k must be a positive number')
end
local rows = redis.call('ZREVRANGE', KEYS[1], 0, k - 1, 'WITHSCORES')
if #rows < 2 * k then
  return rows
end
local last = rows[#rows]
local n = tonumber(last)
local out = {}
local i = 1
while i <= #rows and tonumber(rows[i + 1]) > n do
  out[#out + 1] = rows[i]
  out[#out + 1] = rows[i + 1]
  i = i + 2
end
local ties = redis.call('ZRANGEBYSCORE', KEYS[1], last, last, 'WITHSCORES', 'LIMIT', 0, k - #out / 2)
for j = 1, #ties do
  out[#out + 1] = ties[j]
end
return out
