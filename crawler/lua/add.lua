-- add.lua: admit a batch of torrents to the queue (SPEC §1).
--
-- KEYS[1] ready      ZSET info-hash -> score
-- KEYS[2] since      ZSET info-hash -> time it became ready
-- KEYS[3] cooling    ZSET info-hash -> due time
-- KEYS[4] leases     ZSET info-hash -> lease deadline
-- KEYS[5] evicted    ZSET info-hash -> eviction time
-- KEYS[6] tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[7] held       HASH info-hash -> score while cooling or in flight
-- KEYS[5+2i+1], KEYS[5+2i+2] (i = 1..n): torrent HASH and trackers SET of item i
--
-- ARGV[1] now, ARGV[2] readmit (1/0), ARGV[3] initial score
-- then per item: info-hash, number of trackers k, k tracker URLs
--
-- Returns one letter per item: a = added, t = already tracked (trackers
-- merged), e = evicted and skipped, r = evicted and re-admitted.
-- A new torrent enters ready; a tracked one keeps its score and state.

local now = ARGV[1]
local readmit = ARGV[2] == '1'
local initial = ARGV[3]
local out = {}
local a = 4
local i = 0
while a <= #ARGV do
  i = i + 1
  local h = ARGV[a]
  local k = tonumber(ARGV[a + 1])
  local tkey = KEYS[7 + 2 * i - 1]
  local trkey = KEYS[7 + 2 * i]
  local status
  if redis.call('ZSCORE', KEYS[5], h) then
    if readmit then
      redis.call('ZREM', KEYS[5], h)
      redis.call('HDEL', KEYS[6], h)
      redis.call('PERSIST', tkey)
      redis.call('PERSIST', trkey)
      redis.call('ZADD', KEYS[1], initial, h)
      redis.call('ZADD', KEYS[2], now, h)
      status = 'r'
    else
      status = 'e'
    end
  elseif redis.call('ZSCORE', KEYS[1], h) or redis.call('ZSCORE', KEYS[3], h)
      or redis.call('ZSCORE', KEYS[4], h) then
    status = 't'
  else
    redis.call('ZADD', KEYS[1], initial, h)
    redis.call('ZADD', KEYS[2], now, h)
    status = 'a'
  end
  if k > 0 and status ~= 'e' then
    redis.call('SADD', trkey, unpack(ARGV, a + 2, a + 1 + k))
  end
  out[i] = status
  a = a + 2 + k
end
return table.concat(out)
