-- defer.lua: put a claimed torrent back to cooling unvisited, until ARGV[3]
-- (SPEC §1): nothing was asked, so nothing is counted, and the held score
-- stays as it is. The worker defers a torrent whose trackers are all inside
-- the min interval they gave and which has no DHT to ask.
--
-- KEYS[1] leases ZSET info-hash -> lease deadline
-- KEYS[2] claims HASH info-hash -> times claimed (the lease token)
-- KEYS[3] cooling ZSET info-hash -> due time
--
-- ARGV[1] info-hash, ARGV[2] token, ARGV[3] due time
--
-- Returns 1, or 0 when the lease is not this holder's any more.

local h = ARGV[1]
if redis.call('HGET', KEYS[2], h) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], h) then
  return 0
end
redis.call('ZREM', KEYS[1], h)
redis.call('ZADD', KEYS[3], ARGV[3], h)
return 1
