-- settle.lua: after a post, drop what StatHat accepted or put the rest back.
--
-- KEYS[1]  outbox    HASH stat name -> pending count ({ns}:sh:outbox)
-- KEYS[2]  inflight  HASH stat name -> count being posted ({ns}:sh:inflight)
-- KEYS[3]  owner     STRING token of the claiming flusher ({ns}:sh:owner)
-- ARGV[1]  token     this flusher's token
-- ARGV[2]  mode      "ack": delete fields ARGV[3..] (they were posted);
--                    "nack": add every in-flight count back into the outbox
--                    and end the claim
--
-- A flusher whose claim was taken over by another (its lease ran out) must
-- not settle: returns 0 and changes nothing. Otherwise returns 1.

local owner = redis.call('GET', KEYS[3])
if owner and owner ~= ARGV[1] then
  return 0
end
if ARGV[2] == 'ack' then
  for i = 3, #ARGV, 500 do
    redis.call('HDEL', KEYS[2], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[3])
  end
  return 1
end
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do
  redis.call('HINCRBY', KEYS[1], flat[i], flat[i + 1])
end
redis.call('DEL', KEYS[2], KEYS[3])
return 1
