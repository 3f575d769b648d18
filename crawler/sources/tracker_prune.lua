-- Forget the health of trackers no torrent has used for a while, atomically.
--
-- Every announce (or its batched record) sets a tracker's last-used time in
-- KEYS[2]; a tracker that any torrent still names is announced at least once
-- per revisit interval or backoff, so an entry unused past the cutoff belongs
-- to trackers no torrent uses any more. Entry and index go together.
--
-- KEYS[1]  HASH tracker URL -> JSON health  (keys.tracker_health)
-- KEYS[2]  ZSET tracker URL -> last used    (keys.tracker_used)
-- ARGV[1]  cutoff, unix seconds: entries last used at or before it go
-- ARGV[2]  most entries removed by this call (1..100000)
-- Returns the number of entries removed.
local cutoff = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if cutoff == nil or cutoff ~= cutoff then
  return redis.error_reply('tracker_prune: cutoff is not a number: ' .. tostring(ARGV[1]))
end
if limit == nil or limit < 1 or limit > 100000 or limit ~= math.floor(limit) then
  return redis.error_reply('tracker_prune: limit must be a whole number from 1 to 100000: ' .. tostring(ARGV[2]))
end
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'LIMIT', 0, limit)
-- unpack in slices: Lua's stack holds ~8000 values.
for i = 1, #old, 1000 do
  local j = math.min(i + 999, #old)
  redis.call('HDEL', KEYS[1], unpack(old, i, j))
  redis.call('ZREM', KEYS[2], unpack(old, i, j))
end
return #old
