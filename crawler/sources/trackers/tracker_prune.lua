-- Forget the health of trackers no torrent names any more, atomically.
--
-- The caller read the candidates (entries last used or last found named at
-- or before the cutoff, tracker_walk.lua) and asked every shard which of
-- them a torrent not evicted still names (tracker_named.lua). Between that
-- read and this step a worker may have announced to a candidate (a torrent
-- added meanwhile names it): so each candidate is checked again here, in
-- the same step that writes, and only one still at or before the cutoff is
-- touched. A named one gets ARGV[2] as its time in KEYS[2] (found named: not
-- a candidate again for a whole period); an unnamed one leaves the entry,
-- the index and the ranking together, and its counts leave the sums (when
-- it was ranked: an entry written before the ranking was never in them).
--
-- KEYS[1]  HASH tracker URL -> JSON health  (keys.tracker_health)
-- KEYS[2]  ZSET tracker URL -> last used or found named (keys.tracker_used)
-- KEYS[3]  ZSET tracker URL -> traffic      (the ranking, tracker_health.lua)
-- KEYS[4]  HASH answers, failures, refusals, cut -> sums over the entries (tracker_health.lua)
-- ARGV[1]  cutoff, unix seconds
-- ARGV[2]  now, unix seconds: the time a named candidate was found named
-- ARGV[3]  k, how many of the URLs that follow are named
-- ARGV[4..3+k]  candidates some torrent names
-- ARGV[4+k..]   candidates no torrent names
-- Returns the number of entries removed. Every argument is checked before the first write.
local cutoff, now, k = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if cutoff == nil or cutoff ~= cutoff or now == nil or now ~= now then
  return redis.error_reply('tracker_prune: cutoff and now must be numbers: ' .. tostring(ARGV[1]) .. ', '
    .. tostring(ARGV[2]))
end
if k == nil or k < 0 or k ~= math.floor(k) or 3 + k > #ARGV then
  return redis.error_reply('tracker_prune: the named count must be a whole number from 0 to ' .. (#ARGV - 3)
    .. ': ' .. tostring(ARGV[3]))
end
local removed = 0
for i = 4, #ARGV do
  local url = ARGV[i]
  local t = tonumber(redis.call('ZSCORE', KEYS[2], url))
  if t and t <= cutoff then
    if i <= 3 + k then
      redis.call('ZADD', KEYS[2], now, url)
    else
      local raw = redis.call('HGET', KEYS[1], url)
      if raw and redis.call('ZSCORE', KEYS[3], url) then
        local ok, h = pcall(cjson.decode, raw)
        if ok and type(h) == 'table' then
          for _, f in ipairs({'answers', 'failures', 'refusals', 'cut'}) do
            local v = tonumber(h[f]) or 0
            if v ~= 0 and v == math.floor(v) then redis.call('HINCRBY', KEYS[4], f, -v) end
          end
        end
      end
      redis.call('HDEL', KEYS[1], url)
      redis.call('ZREM', KEYS[2], url)
      redis.call('ZREM', KEYS[3], url)
      removed = removed + 1
    end
  end
end
return removed
