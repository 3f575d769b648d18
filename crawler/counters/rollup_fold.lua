-- rollup_fold.lua: add one chunk of a shard's rollup batch to this shard's totals, once.
--
-- KEYS[1]     applied  HASH source shard -> batch * 65536 + chunk: the last chunk of
--                      that shard's batches added here ({tag}:rx:applied)
-- KEYS[2..]   totals   the total indexes this chunk adds to ({tag}:tx:<period>:<scope>):
--                      ZSET member -> count, or HASH for one torrent's
-- ARGV[1]     source   the shard the batch comes from
-- ARGV[2]     mark     batch * 65536 + chunk (chunks numbered from 1, in order)
-- ARGV[3]     kinds    one byte per total key: "z" (ZSET) or "h" (HASH)
-- ARGV[4..]   triples  total key number (1-based, KEYS[1 + n]), member, count
--
-- A chunk is added only if this shard has not seen it or a later one of the
-- same source: a reader that died mid-batch, or two readers adding the same
-- batch, add each chunk exactly once. Chunks are cut the same way by every
-- reader (rollup.py), and each reader adds them in order, so the mark never
-- passes a chunk not yet added. Everything is checked before the first
-- write. Returns 1 when added, 0 when it already was.

local src, mark, kinds = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if not mark or not kinds or #kinds ~= #KEYS - 1 or (#ARGV - 3) % 3 ~= 0 then
  return redis.error_reply('rollup_fold.lua: expected a mark, one kind per total key and triples')
end
for i = 4, #ARGV, 3 do
  local k, n = tonumber(ARGV[i]), tonumber(ARGV[i + 2])
  if not k or k < 1 or k > #KEYS - 1 or not n then
    return redis.error_reply('rollup_fold.lua: bad triple at argument ' .. i)
  end
end
if tonumber(redis.call('HGET', KEYS[1], src) or '0') >= mark then
  return 0
end
for i = 4, #ARGV, 3 do
  local k = tonumber(ARGV[i])
  if string.byte(kinds, k) == 122 then  -- "z"
    redis.call('ZINCRBY', KEYS[k + 1], ARGV[i + 2], ARGV[i + 1])
  else
    redis.call('HINCRBY', KEYS[k + 1], ARGV[i + 1], ARGV[i + 2])
  end
end
redis.call('HSET', KEYS[1], src, ARGV[2])
return 1
