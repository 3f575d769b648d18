-- Take the next prune's candidates. They are trackers last used (or last found named)
-- at or before the cutoff, oldest first; at most one walk of the torrents'
-- tracker sets per ARGV[3] seconds for the whole namespace.
--
-- Finding which candidates a torrent still names reads every tracked
-- torrent's tracker set (tracker_named.lua), so the first process to find
-- candidates takes the walk and notes when (field `walked` of KEYS[2]);
-- the others find it taken until ARGV[3] seconds later. A `walked` time
-- ahead of ARGV[2] (another process's clock) does not hold the walk back.
--
-- KEYS[1]  ZSET tracker URL -> last used or found named (keys.tracker_used)
-- KEYS[2]  HASH of the trackers' sums; field `walked`: when the last walk began
-- ARGV[1]  cutoff, unix seconds
-- ARGV[2]  now, unix seconds
-- ARGV[3]  least seconds between two walks
-- ARGV[4]  most candidates (1..100000)
-- Returns the candidates' URLs ({} when none, or when the walk is taken).
local cutoff, now, every, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if cutoff == nil or cutoff ~= cutoff or now == nil or now ~= now or every == nil or every ~= every then
  return redis.error_reply('tracker_walk: cutoff, now and the interval must be numbers')
end
if limit == nil or limit < 1 or limit > 100000 or limit ~= math.floor(limit) then
  return redis.error_reply('tracker_walk: limit must be a whole number from 1 to 100000: ' .. tostring(ARGV[4]))
end
local walked = tonumber(redis.call('HGET', KEYS[2], 'walked'))
if walked and now >= walked and now - walked < every then
  return {}
end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, limit)
if #old > 0 then
  redis.call('HSET', KEYS[2], 'walked', ARGV[2])
end
return old
