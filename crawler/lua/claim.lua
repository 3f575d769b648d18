-- claim.lua: lease the highest-scored ready torrents (SPEC §1), after
-- bounded housekeeping that every claimer shares:
--   1. expired leases go back to ready with their score unchanged;
--   2. cooling torrents whose due time has come go to ready;
--   3. tombstones older than the tombstone period are forgotten.
-- Each is bounded by ARGV[4] per call so one claim never holds Redis long.
--
-- KEYS[1] ready      ZSET info-hash -> score
-- KEYS[2] since      ZSET info-hash -> time it became ready
-- KEYS[3] cooling    ZSET info-hash -> due time
-- KEYS[4] leases     ZSET info-hash -> lease deadline
-- KEYS[5] evicted    ZSET info-hash -> eviction time
-- KEYS[6] tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[7] held       HASH info-hash -> score while cooling or in flight
-- KEYS[8] claims     HASH info-hash -> times claimed (the lease token)
--
-- ARGV[1] now, ARGV[2] lease deadline, ARGV[3] how many to claim,
-- ARGV[4] housekeeping budget, ARGV[5] tombstone cutoff (evicted before it
-- are forgotten)
--
-- Returns a flat list: info-hash, score (string), token, ... for each claim.

local now = ARGV[1]
local budget = tonumber(ARGV[4])

local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'WITHSCORES', 'LIMIT', 0, budget)
for j = 1, #expired, 2 do
  local h = expired[j]
  local s = redis.call('HGET', KEYS[7], h) or '1'
  redis.call('ZREM', KEYS[4], h)
  redis.call('HDEL', KEYS[7], h)
  redis.call('ZADD', KEYS[1], s, h)
  redis.call('ZADD', KEYS[2], expired[j + 1], h)
end

local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, budget)
for j = 1, #due, 2 do
  local h = due[j]
  local s = redis.call('HGET', KEYS[7], h) or '1'
  redis.call('ZREM', KEYS[3], h)
  redis.call('HDEL', KEYS[7], h)
  redis.call('ZADD', KEYS[1], s, h)
  redis.call('ZADD', KEYS[2], due[j + 1], h)
end

local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[5], 'LIMIT', 0, budget)
for j = 1, #old do
  redis.call('ZREM', KEYS[5], old[j])
  redis.call('HDEL', KEYS[6], old[j])
  redis.call('HDEL', KEYS[8], old[j])
end

local out = {}
local n = tonumber(ARGV[3])
if n > 0 then
  local popped = redis.call('ZPOPMAX', KEYS[1], n)
  for j = 1, #popped, 2 do
    local h, s = popped[j], popped[j + 1]
    redis.call('ZREM', KEYS[2], h)
    redis.call('ZADD', KEYS[4], ARGV[2], h)
    redis.call('HSET', KEYS[7], h, s)
    local token = redis.call('HINCRBY', KEYS[8], h, 1)
    out[#out + 1] = h
    out[#out + 1] = s
    out[#out + 1] = tostring(token)
  end
end
return out
