-- settle.lua: after a post, drop what StatHat accepted and renew the claim,
-- or end the claim and leave the rest in flight.
--
-- KEYS[1]  inflight  HASH stat name -> count being posted ({ns}:sh:inflight)
-- KEYS[2]  owner     STRING "<token> <lease end, Redis ms>" ({ns}:sh:owner)
-- ARGV[1]  token     this flusher's token
-- ARGV[2]  lease     milliseconds the renewed claim is held
-- ARGV[3]  mode      "ack": delete fields ARGV[4..] (they were posted) and
--                    renew the lease (no fields: just renew); the claim ends
--                    with the last field. "release": end the claim and leave
--                    the in-flight hash as it is: the next flush, this
--                    flusher's or another's, takes it at once (take.lua,
--                    recovered) and posts it before the outbox
--
-- Releasing writes nothing but the owner: adding a large backlog's counts
-- back into the outbox, one HINCRBY each, held Redis ~1.3 s for a million
-- stats, after every failed post.
--
-- Only the flusher the owner key names may settle, lapsed lease or not: once
-- another flusher took the batch over (or the claim ended), this returns 0
-- and changes nothing, and the caller stops posting. Otherwise returns 1.
-- A lapsed claim nobody took over is still this flusher's: its acks count,
-- so nothing it posted is posted again.

local token, lease, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if (mode ~= 'ack' and mode ~= 'release') or not lease or lease <= 0 then
  return redis.error_reply('settle.lua: expected a lease in ms and mode ack or release')
end
local owner = redis.call('GET', KEYS[2])
if not owner or string.match(owner, '^(%S+) ') ~= token then
  return 0
end
if mode == 'ack' then
  for i = 4, #ARGV, 500 do
    redis.call('HDEL', KEYS[1], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[2])
  else
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('SET', KEYS[2], token .. ' ' .. string.format('%d', now + lease))
  end
  return 1
end
redis.call('DEL', KEYS[2])
return 1
