-- pin.lua: exempt a tracked torrent from eviction, or end that (contract §1, §7).
--
-- KEYS[1] ready, KEYS[2] cooling, KEYS[3] leases, KEYS[4] quarantined  ZSETs: a
--         torrent in one of them is tracked
-- KEYS[5] evicted  ZSET info-hash -> eviction time
-- KEYS[6] torrent  HASH of the torrent (field `pinned`)
-- KEYS[7] atrisk   ZSET info-hash -> time from which a visit without peers evicts it
-- ARGV[1] info-hash, ARGV[2] "pin" or "unpin", ARGV[3] (pin) "forever" or the
--         unix time until which the pin holds
--
-- Returns "pinned" / "unpinned", or "evicted" / "untracked" (nothing changed).
-- A pinned torrent leaves the at-risk set at once; an unpinned one comes back
-- to it with its next completion, which judges its score and stage afresh.

local h, op, till = ARGV[1], ARGV[2], ARGV[3]
if #h ~= 40 or (op ~= 'pin' and op ~= 'unpin')
    or (op == 'pin' and till ~= 'forever' and not (tonumber(till) and tonumber(till) == tonumber(till))) then
  return redis.error_reply('pin.lua: bad arguments')
end
local tracked = false
for i = 1, 4 do
  if redis.call('ZSCORE', KEYS[i], h) then tracked = true end
end
if not tracked then
  if redis.call('ZSCORE', KEYS[5], h) then return 'evicted' end
  return 'untracked'
end
if op == 'pin' then
  redis.call('HSET', KEYS[6], 'pinned', till, 'at_risk', '')
  redis.call('ZREM', KEYS[7], h)
  return 'pinned'
end
redis.call('HDEL', KEYS[6], 'pinned')
return 'unpinned'
