-- claim.lua: take the StatHat outbox for posting (or recover an abandoned batch).
--
-- KEYS[1]  outbox    HASH stat name -> pending count ({ns}:sh:outbox)
-- KEYS[2]  inflight  HASH stat name -> count being posted ({ns}:sh:inflight)
-- KEYS[3]  owner     STRING token of the flusher posting it, with a lease TTL
--                    ({ns}:sh:owner)
-- ARGV[1]  token     this flusher's token
-- ARGV[2]  lease     milliseconds the claim is held
--
-- Returns {0} when another flusher holds a live claim, {2} when there is
-- nothing to post, else {1, recovered, field1, count1, ...}: the batch to post
-- (recovered = 1 when it was left in flight by a flusher that died). New
-- increments keep landing in the outbox while a batch is in flight.

local owner = redis.call('GET', KEYS[3])
if redis.call('EXISTS', KEYS[2]) == 1 then
  if owner and owner ~= ARGV[1] then
    return {0}
  end
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
  return {1, 1, redis.call('HGETALL', KEYS[2])}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {2}
end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
return {1, 0, redis.call('HGETALL', KEYS[2])}
