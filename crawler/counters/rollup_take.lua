-- rollup_take.lua: take one shard's rollup outbox for adding to the totals.
--
-- KEYS[1]  outbox    HASH counter -> count not yet in the totals ({tag}:rx:outbox)
-- KEYS[2]  inflight  HASH: the batch being added ({tag}:rx:inflight)
-- KEYS[3]  seq       STRING integer: the batch's number ({tag}:rx:seq)
-- KEYS[4]  taken     STRING: Redis ms when the batch in flight was taken ({tag}:rx:taken)
-- ARGV[1]  fresh     ms: leave a batch in flight alone while it is younger than this
--                    (its reader is presumably still adding it); 0: take it anyway
--
-- Returns {0} when there is nothing to add, {-1} when a batch younger than
-- ``fresh`` is in flight, else {batch, recovered}: the batch in flight if
-- there is one (recovered = 1: another reader is adding it, or one died doing
-- so; adding it again is harmless, see rollup_fold.lua), else the outbox,
-- renamed into flight under a new number. record.lua keeps writing a fresh
-- outbox meanwhile, so a batch never changes while it is in flight, and the
-- caller reads it with HSCAN (a backlog of a million counters would hold
-- Redis for seconds in one HGETALL), then checks the batch is still the one
-- in flight.

local fresh = tonumber(ARGV[1])
if not fresh or fresh < 0 then
  return redis.error_reply('rollup_take.lua: expected a number of ms')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[2]) == 1 then
  local at = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
  if fresh > 0 and now - at < fresh then
    return {-1}
  end
  local id = redis.call('GET', KEYS[3])
  if not id then
    id = redis.call('INCR', KEYS[3])
  end
  return {tonumber(id), 1}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('SET', KEYS[4], string.format('%d', now))
return {redis.call('INCR', KEYS[3]), 0}
