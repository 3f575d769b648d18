-- extend.lua: push a lease's deadline out while its visit runs.
--
-- KEYS[1] leases ZSET info-hash -> lease deadline
-- KEYS[2] claims HASH info-hash -> times claimed (the lease token)
-- ARGV[1] info-hash, ARGV[2] token, ARGV[3] new deadline
--
-- Returns 1, or 0 if the lease is no longer this holder's (it expired and
-- was reclaimed, or was completed). The deadline is checked before the write.

local h = ARGV[1]
local deadline = tonumber(ARGV[3])
if not deadline or deadline ~= deadline then return redis.error_reply('extend.lua: bad arguments') end
if redis.call('HGET', KEYS[2], h) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], h) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], h)
return 1
