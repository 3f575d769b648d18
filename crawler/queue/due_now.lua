-- due_now.lua: make a cooling torrent due at once (torrent --due-now, add --due-now; contract §7).
--
-- A cooling torrent's due time becomes now, in the cooling set and in its
-- lane's due index, so the next claim's housekeeping brings it to ready with
-- its score unchanged, as its own due time would have. Nothing else moves: a
-- ready or in-flight torrent is due already, a quarantined or evicted one
-- comes back only through add --readmit, and the min interval a tracker gave
-- still holds (the visit skips that tracker until then).
--
-- KEYS[1] cooling      ZSET info-hash -> due time
-- KEYS[2] ready        ZSET of its shard's normal lane (tracked, ready)
-- KEYS[3] leases       ZSET info-hash -> lease deadline
-- KEYS[4] quarantined  ZSET info-hash -> quarantine time
-- KEYS[5] evicted      ZSET info-hash -> eviction time
-- KEYS[6..] the member sets of the high, low and discovered lanes (ZSETs,
--          info-hash -> its due time while it cools, else 0)
-- ARGV[1] info-hash, ARGV[2] now
--
-- Returns "due" (made due now), "ready" (due already), "in_flight", "quarantined",
-- "evicted" or "untracked" (nothing changed). Everything is read and
-- checked before the one write.

local h, now = ARGV[1], tonumber(ARGV[2])
if #ARGV ~= 2 or #h ~= 40 or not now or now ~= now or #KEYS < 5 then
  return redis.error_reply('due_now.lua: bad arguments')
end
local due = redis.call('ZSCORE', KEYS[1], h)
if not due then
  if redis.call('ZSCORE', KEYS[3], h) then return 'in_flight' end
  if redis.call('ZSCORE', KEYS[4], h) then return 'quarantined' end
  if redis.call('ZSCORE', KEYS[5], h) then return 'evicted' end
  for i = 6, #KEYS do
    local s = redis.call('ZSCORE', KEYS[i], h)
    if s then return 'ready' end  -- a member of a lane, out of cooling: in that lane's ready set
  end
  if redis.call('ZSCORE', KEYS[2], h) then return 'ready' end
  return 'untracked'
end
if tonumber(due) <= now then return 'ready' end  -- due already: the next claim's housekeeping takes it
local lanes = {}
for i = 6, #KEYS do
  local s = redis.call('ZSCORE', KEYS[i], h)
  if s and tonumber(s) > now then lanes[#lanes + 1] = KEYS[i] end
end
redis.call('ZADD', KEYS[1], 'XX', now, h)
for _, key in ipairs(lanes) do
  redis.call('ZADD', key, 'XX', now, h)
end
return 'due'
