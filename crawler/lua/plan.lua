-- plan.lua: what a visit needs to know before asking anyone (read only):
-- the torrent's own trackers and, per tracker, the unix time before which it
-- may not be announced to again (its last min interval).
--
-- KEYS[1] trackers            SET of the torrent's own tracker URLs
-- KEYS[2] tracker_min_interval HASH tracker URL -> not-before unix time
--
-- Returns {trackers, {url, time, url, time, ...}}. One script call rather
-- than a two-command pipeline: the same round trip, less client work.

return {redis.call('SMEMBERS', KEYS[1]), redis.call('HGETALL', KEYS[2])}
