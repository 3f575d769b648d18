-- visited.lua: count a torrent in torrents.processed at most once per hour.
--
-- KEYS[1]  hour     HASH info-hash -> 1: torrents visited in this clock hour
--                   ({ns}:sh:processed:<unix hour>)
-- KEYS[2]  outbox   HASH stat name -> pending StatHat count ({ns}:sh:outbox)
-- ARGV[1]  info-hash (lower-case hex)
-- ARGV[2]  seconds the hour key is kept (past the end of its hour)
--
-- Returns 1 when this is the torrent's first visit of the hour (the outbox's
-- torrents.processed got +1), else 0.

local keep = tonumber(ARGV[2])
if not keep or keep < 1 or #ARGV[1] ~= 40 then  -- checked before the first write
  return redis.error_reply('visited.lua: bad info-hash or seconds')
end
if redis.call('HSETNX', KEYS[1], ARGV[1], 1) == 1 then
  redis.call('EXPIRE', KEYS[1], math.floor(keep))
  redis.call('HINCRBY', KEYS[2], 'torrents.processed', 1)
  return 1
end
return 0
