-- note.lua: what one visit learned about a torrent's sources, in one step
-- (crawler/queue/source_notes.py): fields set, fields dropped, and the
-- hash's life renewed. Every argument is checked before the first write.
--
-- KEYS[1] notes HASH (keys.tracker_min_interval)
--
-- ARGV[1] seconds the hash lives after this write (whole, >= 1)
-- ARGV[2] n, the fields to set; ARGV[3 .. 2 + 2n]: field, value
-- ARGV[3 + 2n ..] the fields to drop
--
-- Returns the hash's field count.

--! include slices  (STEP, each, read)

local ttl, n = tonumber(ARGV[1]), tonumber(ARGV[2])
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) or not n or n < 0 or n ~= math.floor(n) or #ARGV < 2 + 2 * n then
  return redis.error_reply('note.lua: bad arguments')
end
if n > 0 then
  local set = {}
  for i = 3, 2 + 2 * n do set[#set + 1] = ARGV[i] end
  each('HSET', KEYS[1], set)  -- a torrent may have 10,000 trackers: in slices
end
if #ARGV > 2 + 2 * n then
  local drop = {}
  for i = 3 + 2 * n, #ARGV do drop[#drop + 1] = ARGV[i] end
  each('HDEL', KEYS[1], drop)
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('EXPIRE', KEYS[1], ttl)
end
return redis.call('HLEN', KEYS[1])
