-- visited.lua: count torrents in torrents.processed at most once per hour each.
--
-- KEYS[1]  hour     HASH info-hash -> 1: torrents visited in this clock hour
--                   ({ns}:sh:processed:<unix hour>)
-- KEYS[2]  outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- ARGV[1]  seconds the hour key is kept (past the end of its hour)
-- ARGV[2..] info-hashes (lower-case hex) visited in this hour, each in this shard
--
-- Returns one byte per info-hash, in order: "1" when it is the torrent's first visit of the
-- hour (the outbox's torrents.processed got +1 for it), else "0". Every argument is checked
-- before the first write.

local keep = tonumber(ARGV[1])
if not keep or keep < 1 then
  return redis.error_reply('visited.lua: bad seconds ' .. tostring(ARGV[1]))
end
for i = 2, #ARGV do
  if #ARGV[i] ~= 40 then
    return redis.error_reply('visited.lua: bad info-hash at argument ' .. i)
  end
end
local out, added = {}, 0
for i = 2, #ARGV do
  if redis.call('HSETNX', KEYS[1], ARGV[i], 1) == 1 then
    added = added + 1
    out[i - 1] = '1'
  else
    out[i - 1] = '0'
  end
end
if added > 0 then
  redis.call('EXPIRE', KEYS[1], math.floor(keep))
  redis.call('HINCRBY', KEYS[2], 'torrents.processed', added)
end
return table.concat(out)
