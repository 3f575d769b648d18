-- add.lua: admit a batch of torrents to the queue (SPEC §1).
--
-- KEYS[1] ready      ZSET info-hash -> score
-- KEYS[2] since      ZSET info-hash -> time it became ready
-- KEYS[3] cooling    ZSET info-hash -> due time
-- KEYS[4] leases     ZSET info-hash -> lease deadline
-- KEYS[5] evicted    ZSET info-hash -> eviction time
-- KEYS[6] tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[7] held       HASH info-hash -> score while cooling or in flight
-- KEYS[8..]        the torrent HASH and trackers SET of each item that has
--                  trackers, or of every item when re-admitting (only those
--                  items' keys are touched, so the others need none)
--
-- ARGV[1] now, ARGV[2] readmit (1/0), ARGV[3] initial score
-- then per item: info-hash, number of trackers k, k tracker URLs
--
-- Returns one letter per item: a = added, t = already tracked (trackers
-- merged), e = evicted and skipped, r = evicted and re-admitted.
-- A new torrent enters ready; a tracked one keeps its score and state.
--
-- Speed: membership of the whole batch in each state is read with one
-- ZMSCORE per state, and new members are written with one ZADD per set, so
-- the script costs a few calls per batch rather than several per item.

local now = ARGV[1]
local readmit = ARGV[2] == '1'
local initial = ARGV[3]

-- pass 1: the batch's hashes, in order
local hashes = {}
local a = 4
while a <= #ARGV do
  hashes[#hashes + 1] = ARGV[a]
  a = a + 2 + tonumber(ARGV[a + 1])
end
if #hashes == 0 then return '' end

local ev = redis.call('ZMSCORE', KEYS[5], unpack(hashes))
local rd = redis.call('ZMSCORE', KEYS[1], unpack(hashes))
local co = redis.call('ZMSCORE', KEYS[3], unpack(hashes))
local le = redis.call('ZMSCORE', KEYS[4], unpack(hashes))

-- pass 2: decide and write
local out = {}
local fresh = {}      -- ZADD arguments: score, member, ...
local since = {}
local seen = {}
local nextkey = 8
a = 4
for i = 1, #hashes do
  local h = hashes[i]
  local k = tonumber(ARGV[a + 1])
  local tkey, trkey
  if k > 0 or readmit then
    tkey, trkey = KEYS[nextkey], KEYS[nextkey + 1]
    nextkey = nextkey + 2
  end
  local status
  if seen[h] then
    status = (seen[h] == 'e') and 'e' or 't'
  elseif ev[i] then
    if readmit then
      redis.call('ZREM', KEYS[5], h)
      redis.call('HDEL', KEYS[6], h)
      redis.call('PERSIST', tkey)
      redis.call('PERSIST', trkey)
      status = 'r'
    else
      status = 'e'
    end
  elseif rd[i] or co[i] or le[i] then
    status = 't'
  else
    status = 'a'
  end
  if (status == 'a' or status == 'r') and not seen[h] then
    fresh[#fresh + 1] = initial
    fresh[#fresh + 1] = h
    since[#since + 1] = now
    since[#since + 1] = h
  end
  if k > 0 and status ~= 'e' then
    redis.call('SADD', trkey, unpack(ARGV, a + 2, a + 1 + k))
  end
  seen[h] = seen[h] or status
  out[i] = status
  a = a + 2 + k
end
if #fresh > 0 then
  redis.call('ZADD', KEYS[1], unpack(fresh))
  redis.call('ZADD', KEYS[2], unpack(since))
end
return table.concat(out)
