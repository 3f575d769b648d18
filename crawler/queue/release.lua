-- release.lua: hand a claimed torrent back unvisited (worker shutdown): it
-- returns to its lane's ready set at once with its score unchanged.
--
-- KEYS[1] leases ZSET info-hash -> lease deadline
-- KEYS[2] held   HASH info-hash -> score while cooling or in flight
-- KEYS[3] claims HASH info-hash -> times claimed (the lease token)
-- KEYS[4] ready  ZSET info-hash -> score (the normal lane's)
-- KEYS[5] since  ZSET info-hash -> time it became ready
-- KEYS[6..8] the ready ZSETs of the high, low and discovered lanes
-- KEYS[9..11] the members of the high, low and discovered lanes
--
-- ARGV[1] info-hash, ARGV[2] token, ARGV[3] now
--
-- Returns 1, or 0 when the lease is not this holder's any more. The time
-- is checked before the first write. A hand-back neither counts as an
-- expired lease nor ends a streak of them (the visit did not finish).

local h = ARGV[1]
local t = tonumber(ARGV[3])
if not t or t ~= t then return redis.error_reply('release.lua: bad arguments') end
if redis.call('HGET', KEYS[3], h) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], h) then
  return 0
end
local s = redis.call('HGET', KEYS[2], h) or '1'
local ready = KEYS[4]
for j = 9, 11 do
  if redis.call('ZSCORE', KEYS[j], h) then ready = KEYS[j - 3] end
end
redis.call('ZREM', KEYS[1], h)
redis.call('HDEL', KEYS[2], h)
redis.call('ZADD', ready, s, h)
redis.call('ZADD', KEYS[5], ARGV[3], h)
return 1
