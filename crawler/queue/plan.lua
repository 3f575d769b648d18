-- plan.lua: what a visit may ask (read only). It reads each of one shard's torrents' own
-- trackers, at most ARGV[1] of them, and, per tracker, the unix time before which it may not be
-- announced to again (its last min interval).
--
-- KEYS[3i - 2] trackers             SET of torrent i's own tracker URLs
-- KEYS[3i - 1] tracker_min_interval HASH tracker URL -> not-before unix time
-- KEYS[3i]     torrent              HASH of the torrent
--
-- ARGV[1] most trackers one visit announces to
-- ARGV[2..] fields of the torrent hash to read (what says whether its metadata may be fetched:
--           crawler/queue/torrent_metadata.py)
--
-- Returns per torrent {trackers, {url, time, url, time, ...}, size of the whole set, {those fields'
-- values}, the notes' PTTL (ms; -2 none, -1 no expiry)}: a visit rewrites unchanged notes only when
-- they would not outlive what it needs (workers/visit.py).
-- A set larger than ARGV[1] (stored before the cap, or the cap lowered
-- since) gives a random ARGV[1] of its members, a different draw each
-- visit, so over many visits every tracker is still asked. One script call
-- for many torrents rather than a call each: the same commands, less of
-- Redis's and the client's work a call (crawler/queue/visit_plan.py).

local cap = tonumber(ARGV[1])
if not cap or cap < 0 or cap ~= math.floor(cap) or #KEYS % 3 ~= 0 then
  return redis.error_reply('plan.lua: bad arguments')
end
local fields_of = #ARGV > 1 and {unpack(ARGV, 2)} or nil
local out = {}
for i = 1, #KEYS, 3 do
  local size = redis.call('SCARD', KEYS[i])
  local own
  if size <= cap then
    own = redis.call('SMEMBERS', KEYS[i])
  elseif cap == 0 then
    own = {}
  else
    own = redis.call('SRANDMEMBER', KEYS[i], cap)
  end
  local fields = {}
  if fields_of then
    fields = redis.call('HMGET', KEYS[i + 2], unpack(fields_of))
  end
  out[#out + 1] = {own, redis.call('HGETALL', KEYS[i + 1]), size, fields, redis.call('PTTL', KEYS[i + 1])}
end
return out
