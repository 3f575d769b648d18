-- claim.lua: lease the highest-scored ready torrents (SPEC §1), after
-- bounded housekeeping that every claimer shares:
--   1. expired leases go back to ready with their score unchanged;
--   2. cooling torrents whose due time has come (new ones are due at once)
--      go to ready;
--   3. tombstones older than the tombstone period are forgotten.
-- Each is bounded by ARGV[4] per call so one claim never holds Redis long,
-- and each moves its whole batch with one call per command.
--
-- KEYS[1] ready      ZSET info-hash -> score
-- KEYS[2] since      ZSET info-hash -> time it became ready
-- KEYS[3] cooling    ZSET info-hash -> due time
-- KEYS[4] leases     ZSET info-hash -> lease deadline
-- KEYS[5] evicted    ZSET info-hash -> eviction time
-- KEYS[6] tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[7] held       HASH info-hash -> score while cooling or in flight
--                    (absent: 1.0, a new torrent)
-- KEYS[8] claims     HASH info-hash -> times claimed (the lease token)
--
-- ARGV[1] now, ARGV[2] lease deadline, ARGV[3] how many to claim,
-- ARGV[4] housekeeping budget, ARGV[5] tombstone cutoff (evicted before it
-- are forgotten)
--
-- Returns a flat list: info-hash, score (string), token, ... for each claim.

local now = ARGV[1]
local budget = tonumber(ARGV[4])

-- Move the members of `from` due by now to ready; `since` keeps the time
-- each became due (its due time or lease deadline), for queue latency.
local function promote(from)
  local due = redis.call('ZRANGEBYSCORE', from, '-inf', now, 'WITHSCORES', 'LIMIT', 0, budget)
  if #due == 0 then return end
  local members, when = {}, {}
  for j = 1, #due, 2 do
    members[#members + 1] = due[j]
    when[#when + 1] = due[j + 1]
    when[#when + 1] = due[j]
  end
  local scores = redis.call('HMGET', KEYS[7], unpack(members))
  local ready = {}
  for j = 1, #members do
    ready[#ready + 1] = scores[j] or '1'
    ready[#ready + 1] = members[j]
  end
  redis.call('ZREM', from, unpack(members))
  redis.call('HDEL', KEYS[7], unpack(members))
  redis.call('ZADD', KEYS[1], unpack(ready))
  redis.call('ZADD', KEYS[2], unpack(when))
end

promote(KEYS[4])
promote(KEYS[3])

local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[5], 'LIMIT', 0, budget)
if #old > 0 then
  redis.call('ZREM', KEYS[5], unpack(old))
  redis.call('HDEL', KEYS[6], unpack(old))
  redis.call('HDEL', KEYS[8], unpack(old))
end

local out = {}
local n = tonumber(ARGV[3])
if n > 0 then
  local popped = redis.call('ZPOPMAX', KEYS[1], n)
  if #popped > 0 then
    local members, leases, held = {}, {}, {}
    for j = 1, #popped, 2 do
      local h, s = popped[j], popped[j + 1]
      members[#members + 1] = h
      leases[#leases + 1] = ARGV[2]
      leases[#leases + 1] = h
      held[#held + 1] = h
      held[#held + 1] = s
    end
    redis.call('ZREM', KEYS[2], unpack(members))
    redis.call('ZADD', KEYS[4], unpack(leases))
    redis.call('HSET', KEYS[7], unpack(held))
    for j = 1, #members do
      out[#out + 1] = members[j]
      out[#out + 1] = popped[2 * j]
      out[#out + 1] = tostring(redis.call('HINCRBY', KEYS[8], members[j], 1))
    end
  end
end
return out
