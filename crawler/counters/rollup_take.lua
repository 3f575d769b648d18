-- rollup_take.lua: take one shard's rollup outbox for adding to the totals.
--
-- KEYS[1]  outbox    HASH counter -> count not yet in the totals ({tag}:rx:outbox)
-- KEYS[2]  inflight  HASH: the batch being added ({tag}:rx:inflight)
-- KEYS[3]  seq       STRING integer: the batch's number ({tag}:rx:seq)
--
-- Returns {0} when there is nothing to add, else {batch, recovered, field1,
-- count1, ...}: the batch in flight if there is one (recovered = 1: another
-- reader is adding it, or one died doing so; adding it again is harmless,
-- see rollup_fold.lua), else the outbox, renamed into flight under a new
-- number. record.lua keeps writing a fresh outbox meanwhile, so a batch never
-- changes while it is in flight.

if redis.call('EXISTS', KEYS[2]) == 1 then
  local id = redis.call('GET', KEYS[3])
  if not id then
    id = redis.call('INCR', KEYS[3])
  end
  return {tonumber(id), 1, redis.call('HGETALL', KEYS[2])}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
redis.call('RENAME', KEYS[1], KEYS[2])
return {redis.call('INCR', KEYS[3]), 0, redis.call('HGETALL', KEYS[2])}
