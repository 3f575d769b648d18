-- settle.lua: after a post, drop what StatHat accepted and renew the claim,
-- or put the rest back.
--
-- KEYS[1]  outbox    HASH stat name -> pending count ({ns}:sh:outbox)
-- KEYS[2]  inflight  HASH stat name -> count being posted ({ns}:sh:inflight)
-- KEYS[3]  owner     STRING "<token> <lease end, Redis ms>" ({ns}:sh:owner)
-- ARGV[1]  token     this flusher's token
-- ARGV[2]  lease     milliseconds the renewed claim is held
-- ARGV[3]  mode      "ack": delete fields ARGV[4..] (they were posted) and
--                    renew the lease (no fields: just renew); the claim ends
--                    with the last field. "nack": add every in-flight count
--                    back into the outbox and end the claim
--
-- Only the flusher the owner key names may settle, lapsed lease or not: once
-- another flusher took the batch over (or the claim ended), this returns 0
-- and changes nothing, and the caller stops posting. Otherwise returns 1.
-- A lapsed claim nobody took over is still this flusher's: its acks count,
-- so nothing it posted is posted again.

local token, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if (mode ~= 'ack' and mode ~= 'nack') or not lease or lease <= 0 then
  return redis.error_reply('settle.lua: expected a lease in ms and mode ack or nack')
end
local owner = redis.call('GET', KEYS[3])
if not owner or string.match(owner, '^(%S+) ') ~= token then
  return 0
end
if mode == 'ack' then
  for i = 4, #ARGV, 500 do
    redis.call('HDEL', KEYS[2], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('DEL', KEYS[3])
  else
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('SET', KEYS[3], token .. ' ' .. string.format('%d', now + lease))
  end
  return 1
end
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do
  redis.call('HINCRBY', KEYS[1], flat[i], flat[i + 1])
end
redis.call('DEL', KEYS[2], KEYS[3])
return 1
