-- request_counts.lua: one worker's batch of request counts added to the per-minute hashes, once.
--
-- A batch is (writer, number): the writer is one process (its mark, a field
-- "mark:<random id>"), its batches numbered upwards. A hash whose mark is
-- already at the number holds the batch and is left alone, so a batch
-- sent again after a lost reply (redis-py's retry, or the worker's next
-- write after a failed one) adds nothing twice. A field given a fallback (a
-- tracker's own "<kind>:<url>") is created only while the hash has fewer
-- than ARGV[4] fields; past that its increment goes to the fallback (the
-- others' "others:<kind>"), so a minute's hash stays bounded however many
-- trackers and workers write to it. Every hash written expires ARGV[3]
-- seconds later.
--
-- KEYS[i]  HASH  one minute's figures (keys.request_minute)
-- ARGV[1]  the writer's mark field, ARGV[2] the batch's number (>= 1), ARGV[3] seconds the hashes live,
-- ARGV[4]  the fields a hash may hold before fallbacks are used
-- then, per key in order: m, then m triples (field, increment >= 1, fallback field or '')
-- Returns how many hashes it wrote (the others held the batch already).

local SCRIPT = 'request_counts.lua'
--! include whole  (whole)

local mark = ARGV[1]
local number = whole(ARGV[2], 1, 'batch number')
local ttl = whole(ARGV[3], 1, 'lifetime')
local room = whole(ARGV[4], 0, 'field bound')
-- every argument is checked before the first write
local a = 5
for i = 1, #KEYS do
  local m = whole(ARGV[a], 0, 'field count')
  for j = 0, m - 1 do
    whole(ARGV[a + 2 + 3 * j], 1, 'increment of ' .. tostring(ARGV[a + 1 + 3 * j]))
    if ARGV[a + 3 + 3 * j] == nil then error('request_counts.lua: a triple is cut short') end
  end
  a = a + 1 + 3 * m
end
if a ~= #ARGV + 1 then
  return redis.error_reply('request_counts.lua: ' .. (#ARGV + 1 - a) .. ' arguments left over')
end

local written = 0
a = 5
for i = 1, #KEYS do
  local key = KEYS[i]
  local m = tonumber(ARGV[a])
  if tonumber(redis.call('HGET', key, mark) or '0') < number then
    for j = 0, m - 1 do
      local field, n, fallback = ARGV[a + 1 + 3 * j], ARGV[a + 2 + 3 * j], ARGV[a + 3 + 3 * j]
      if fallback ~= '' and redis.call('HLEN', key) >= room and redis.call('HEXISTS', key, field) == 0 then
        field = fallback
      end
      redis.call('HINCRBY', key, field, n)
    end
    redis.call('HSET', key, mark, number)
    redis.call('EXPIRE', key, ttl)
    written = written + 1
  end
  a = a + 1 + 3 * m
end
return written
