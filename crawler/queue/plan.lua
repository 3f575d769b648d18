-- plan.lua: what a visit may ask (read only). It reads the torrent's own trackers, at most ARGV[1] of them, and, per tracker,
-- the unix time before which it may not be announced to again (its last
-- min interval).
--
-- KEYS[1] trackers             SET of the torrent's own tracker URLs
-- KEYS[2] tracker_min_interval HASH tracker URL -> not-before unix time
-- KEYS[3] torrent              HASH of the torrent
--
-- ARGV[1] most trackers one visit announces to
-- ARGV[2..] fields of the torrent hash to read (what says whether its metadata may be fetched:
--           crawler/queue/torrent_metadata.py)
--
-- Returns {trackers, {url, time, url, time, ...}, size of the whole set, {those fields' values},
-- the notes' PTTL (ms; -2 none, -1 no expiry)}: a visit rewrites unchanged notes only when they
-- would not outlive what it needs (workers/visit.py).
-- A set larger than ARGV[1] (stored before the cap, or the cap lowered
-- since) gives a random ARGV[1] of its members, a different draw each
-- visit, so over many visits every tracker is still asked. One script call
-- rather than a pipeline: the same round trip, less client work.

local cap = tonumber(ARGV[1])
if not cap or cap < 0 or cap ~= math.floor(cap) then
  return redis.error_reply('plan.lua: bad arguments')
end
local size = redis.call('SCARD', KEYS[1])
local own
if size <= cap then
  own = redis.call('SMEMBERS', KEYS[1])
elseif cap == 0 then
  own = {}
else
  own = redis.call('SRANDMEMBER', KEYS[1], cap)
end
local fields = {}
if #ARGV > 1 then
  fields = redis.call('HMGET', KEYS[3], unpack(ARGV, 2))
end
return {own, redis.call('HGETALL', KEYS[2]), size, fields, redis.call('PTTL', KEYS[2])}
