-- delete_if.lua: delete a key only while it still holds a given value. One
-- step (``peercrawl secret --move`` deletes the fingerprint key it has
-- just handed over, never a key written since). One key, so it runs on a
-- single Redis and on a cluster alike (WATCH/MULTI does not on redis-py's
-- cluster client).
--
-- KEYS[1]  the key
-- ARGV[1]  the value it must hold
--
-- Returns 1 if the key was deleted, 0 if it held something else or nothing.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
