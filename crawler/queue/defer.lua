-- defer.lua: put a claimed torrent back to cooling until ARGV[3], its held
-- score kept (contract §1), and with KEYS[5..6] note a failed visit. Either way
-- the worker came back with the torrent, which ends its streak of expired
-- leases.
--
-- Two callers: Queue.defer, for a torrent nothing was asked of (its
-- trackers all inside the min interval they gave, no DHT), which counts
-- neither a visit nor a failure (4 keys, 3 args); Queue.fail, for a visit no
-- source answered, which cools for the short retry delay and counts the
-- failure and keeps its reason on the torrent (6 keys, 6 args). Either may
-- add up to 3 keys: member sets of the high, low or discovered lane (the
-- torrent's, or all three when its lane is not known); the torrent gets its
-- due time there (claim.lua's due index of its lane).
--
-- KEYS[1] leases   ZSET info-hash -> lease deadline
-- KEYS[2] claims   HASH info-hash -> times claimed (the lease token)
-- KEYS[3] cooling  ZSET info-hash -> due time
-- KEYS[4] expiries HASH info-hash -> leases expired in a row
-- KEYS[5] torrent  HASH of this torrent                    (a failure only)
-- KEYS[6] failed   HASH unix minute -> failed visits       (a failure only)
-- then (optional) member sets of lanes (ZSETs)
--
-- ARGV[1] info-hash, ARGV[2] token, ARGV[3] due time; a failure also
-- ARGV[4] now, ARGV[5] minute, ARGV[6] error text
--
-- Returns 1, or 0 when the lease is not this holder's any more. Every
-- argument is checked before the first write.

local h = ARGV[1]
local failure = #ARGV == 6
local lanes = failure and 7 or 5  -- the first member set's index
local due = tonumber(ARGV[3])
-- (due ~= due: NaN)
if not due or due ~= due or (#ARGV ~= 3 and not failure) or #KEYS < lanes - 1 or #KEYS > lanes + 2
    or (failure and not (tonumber(ARGV[4]) and tonumber(ARGV[5]) and ARGV[6])) then
  return redis.error_reply('defer.lua: bad arguments')
end
if redis.call('HGET', KEYS[2], h) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], h) then
  return 0
end
if failure and not (tonumber(redis.call('HGET', KEYS[5], 'failed_visits') or '0')
    and tonumber(redis.call('HGET', KEYS[6], ARGV[5]) or '0')) then
  return redis.error_reply('defer.lua: a stored failure count of ' .. h .. ' is not a number')
end
redis.call('ZREM', KEYS[1], h)
redis.call('ZADD', KEYS[3], ARGV[3], h)
for j = lanes, #KEYS do redis.call('ZADD', KEYS[j], 'XX', ARGV[3], h) end  -- only its lane's set has it
redis.call('HDEL', KEYS[4], h)
if failure then
  redis.call('HINCRBY', KEYS[5], 'failed_visits', 1)
  redis.call('HSET', KEYS[5], 'last_failure', ARGV[4], 'last_error', ARGV[6])
  redis.call('HINCRBY', KEYS[6], ARGV[5], 1)
end
return 1
