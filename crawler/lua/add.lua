-- add.lua: admit a batch of torrents to the queue (SPEC §1).
--
-- KEYS[1] ready      ZSET info-hash -> score
-- KEYS[2] cooling    ZSET info-hash -> due time
-- KEYS[3] leases     ZSET info-hash -> lease deadline
-- KEYS[4] evicted    ZSET info-hash -> eviction time
-- KEYS[5] tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[6..]        the torrent HASH and trackers SET of each item that has
--                  trackers, or of every item when re-admitting (only those
--                  items' keys are touched, so the others need none)
--
-- ARGV[1] now, ARGV[2] readmit (1/0)
-- then per item: info-hash, number of trackers k, k tracker URLs
--
-- Returns one letter per item: a = added, t = already tracked (trackers
-- merged), e = evicted and skipped, r = evicted and re-admitted.
--
-- A new torrent enters the due queue (cooling, due now) with no held score,
-- which means score 1.0: it is ready from this instant (status counts it
-- so) and the next claims move it into the ready set. One ZADD per batch is
-- all an admission writes, which keeps bulk intake near a bare ZADD. A
-- tracked torrent keeps its score and state.
--
-- Membership of the whole batch in each state is read with one ZMSCORE per
-- state, so the script costs a few calls per batch rather than per item.

local now = ARGV[1]
local readmit = ARGV[2] == '1'

local hashes = {}
local a = 3
while a <= #ARGV do
  hashes[#hashes + 1] = ARGV[a]
  a = a + 2 + tonumber(ARGV[a + 1])
end
if #hashes == 0 then return '' end

local ev = redis.call('ZMSCORE', KEYS[4], unpack(hashes))
local rd = redis.call('ZMSCORE', KEYS[1], unpack(hashes))
local co = redis.call('ZMSCORE', KEYS[2], unpack(hashes))
local le = redis.call('ZMSCORE', KEYS[3], unpack(hashes))

local out = {}
local due = {}        -- ZADD arguments: due time, member, ...
local seen = {}
local nextkey = 6
a = 3
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
      redis.call('ZREM', KEYS[4], h)
      redis.call('HDEL', KEYS[5], h)
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
    due[#due + 1] = now
    due[#due + 1] = h
  end
  if k > 0 and status ~= 'e' then
    redis.call('SADD', trkey, unpack(ARGV, a + 2, a + 1 + k))
  end
  seen[h] = seen[h] or status
  out[i] = status
  a = a + 2 + k
end
if #due > 0 then
  redis.call('ZADD', KEYS[2], unpack(due))
end
return table.concat(out)
