-- rollup_done.lua: end a shard's rollup batch once every chunk is in the totals.
--
-- KEYS[1]  inflight  HASH: the batch being added ({tag}:rx:inflight)
-- KEYS[2]  seq       STRING integer: the number of the batch in flight ({tag}:rx:seq)
-- ARGV[1]  batch     the number of the batch the caller added
--
-- Deletes the batch only if it is still that one (a slow reader never ends
-- a later batch); UNLINK, so a large batch is freed in the background.
-- Returns 1 when it ended it, else 0.

if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('UNLINK', KEYS[1])
  return 1
end
return 0
