-- complete.lua: finish a visit that some source answered (contract §1, §2).
-- The new score is the held score times ARGV[3]; below ARGV[4] the torrent
-- is evicted (tombstone kept ARGV[7] seconds), else it cools until ARGV[6].
-- Staged eviction (torrents that never had a peer get a grace, docs/decisions.md): a visit without peers evicts
-- only once the torrent's stage's grace has run (ARGV[15] from its first
-- visit for a torrent never seen with a peer, "never had peers"; ARGV[16]
-- from the last peer seen for one that had some, "lost its peers"), and a
-- pinned torrent (torrent field `pinned`: "forever" or a unix time until
-- which it holds) never; until then its score is held at the threshold. A
-- visit with peers below the threshold evicts for "low score" (contract §2)
-- unless pinned or held (its peers came back: it stays held while it has
-- peers, and leaves the threshold with a full and fresh visit). A torrent one more visit without peers (ARGV[17]: that
-- visit's multiplier) would bring below the threshold is "at risk": KEYS[13]
-- holds it with the time from which that visit evicts it.
-- A completion ends the torrent's streak of expired leases. The history
-- string keeps the torrent's last ARGV[13] visits, 20 bytes each
-- (little-endian u32 time, f32 new score, u32 peers, u32 seeders, u32
-- leechers; 0xFFFFFFFF: not reported); 0 keeps none. A ring: a visit
-- overwrites entry `visits mod ARGV[13]` with one SETRANGE, unread (readers
-- order the entries by time and skip those of time 0, the padding of a ring
-- begun past its start), so a completion copies 20 bytes, not the whole
-- history twice. A string of its own: as a field of the torrent hash it would
-- pass the 64-byte listpack limit and cost the hash ~700 bytes more in a
-- hashtable.
--
-- KEYS[1]  leases     ZSET info-hash -> lease deadline
-- KEYS[2]  held       HASH info-hash -> score while out of ready
-- KEYS[3]  claims     HASH info-hash -> times claimed (the lease token)
-- KEYS[4]  cooling    ZSET info-hash -> due time
-- KEYS[5]  evicted    ZSET info-hash -> eviction time
-- KEYS[6]  tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[7]  torrent    HASH of this torrent (visits, last_visit, seeders, ...)
-- KEYS[8]  trackers   SET of this torrent's own trackers
-- KEYS[9]  visits     HASH unix minute -> visits completed
-- KEYS[10] expiries   HASH info-hash -> leases expired in a row
-- KEYS[11] history    STRING of this torrent's last visits
-- KEYS[12] rates      HASH per-minute counts (crawler/queue/rates.py)
-- KEYS[13] atrisk     ZSET info-hash -> time from which a visit without peers evicts it
-- KEYS[14] notes      HASH of this torrent's source notes (keys.tracker_min_interval)
-- KEYS[15..] (optional) member sets of the high, low or discovered lane (the
--          torrent's, or all three when its lane is not known): a torrent
--          back to cooling gets its due time there (claim.lua's due index
--          of its lane)
--
-- ARGV[1] info-hash, ARGV[2] token, ARGV[3] multiplier, ARGV[4] threshold,
-- ARGV[5] now, ARGV[6] due time, ARGV[7] tombstone seconds,
-- ARGV[8] seeders ('' unknown), ARGV[9] leechers ('' unknown),
-- ARGV[10] peers found, ARGV[11] minute, ARGV[12] outcome (none/some/full),
-- ARGV[13] visits kept in the history (0-10000), ARGV[14] the rates field of
-- this visit's round trip ('' when its claim time is unknown), ARGV[15] and
-- ARGV[16] the graces (seconds) of a torrent never seen with a peer and of
-- one that lost its peers, ARGV[17] the multiplier of a visit without peers,
-- ARGV[18] the swarm size the visit's sources reported ('' unknown),
-- ARGV[19] the IPs this visit counted for the first time in the dedupe
-- window (the recorder's answer), ARGV[20] the visit's unix day, ARGV[21]
-- '1' when the seeders and leechers are the DHT's estimates (BEP 33), else '0'
-- (the torrent hash's `counts_estimated` is kept only while they are),
-- ARGV[22..] the visit's source notes as note.lua takes them from its ARGV[1]
-- (notes_write.lua: life, n, n field-value pairs, fields to drop), or '' for
-- none. They are written first, whatever the lease's state: the sources were
-- asked, and a stale lease does not make their min intervals any shorter.
--
-- Coverage (crawler/queue/coverage.py): the torrent hash keeps `reported`
-- (the last visit's, deleted when it had none) and `n:<day>`, the IPs first
-- counted that day, for the last 30 days (the visit's day and the 29
-- before): the fields of days the window has left since the previous visit
-- are deleted here (at most 30 a call: the previous visit left only its own
-- day and the 29 before it). A visit with a
-- reported size adds its peers and that size to the rates HASH's
-- `cc:<minute>` and `cr:<minute>`, the catalogue's coverage.
--
-- Returns {'cooling'|'evicted', new score as string} or {'stale'} when the
-- lease is not this holder's any more (nothing changed but the notes). Every
-- argument is checked before the first write.

--! include slices  (STEP, each, read)
--! include notes_write  (notes_bad, write_notes)

local h = ARGV[1]
local mult, threshold, kept = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[13])
local function number(v)  -- a number ZADD takes (tonumber accepts NaN, ZADD does not)
  local x = tonumber(v)
  return x ~= nil and x == x
end
if not (mult and threshold and number(ARGV[5]) and number(ARGV[6]) and tonumber(ARGV[7])
    and tonumber(ARGV[10]) and tonumber(ARGV[11]) and kept)
    or kept < 0 or kept > 10000 or kept % 1 ~= 0
    or (ARGV[8] ~= '' and not tonumber(ARGV[8])) or (ARGV[9] ~= '' and not tonumber(ARGV[9]))
    or not ARGV[14] or (ARGV[14] ~= '' and not string.match(ARGV[14], '^rt:%d+:%d+$'))
    or not number(ARGV[15]) or not number(ARGV[16]) or not number(ARGV[17])
    or (ARGV[18] ~= '' and not (number(ARGV[18]) and tonumber(ARGV[18]) >= 0))
    or not (number(ARGV[19]) and tonumber(ARGV[19]) >= 0) or not number(ARGV[20])
    or (ARGV[21] ~= '0' and ARGV[21] ~= '1') or not ARGV[22] or (ARGV[22] ~= '' and notes_bad(22)) then
  return redis.error_reply('complete.lua: bad arguments')
end
if ARGV[22] ~= '' then write_notes(KEYS[14], 22) end
if redis.call('HGET', KEYS[3], h) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[1], h) then
  return {'stale'}
end
local score = tonumber(redis.call('HGET', KEYS[2], h) or '1')
-- the torrent's record: visits, and the stages of staged eviction (`at_risk`:
-- the time it is in KEYS[13] with, so the set is written only when that changes)
local record = redis.call('HMGET', KEYS[7], 'visits', 'first_visit', 'last_peers', 'pinned', 'at_risk',
  'reported', 'last_visit', 'counts_estimated')
local visits = tonumber(record[1] or '0')
if not score or not visits
    or not tonumber(redis.call('HGET', KEYS[9], ARGV[11]) or '0') then
  return redis.error_reply('complete.lua: a stored score or count of ' .. h .. ' is not a number')
end
local now = tonumber(ARGV[5])
local first_visit = tonumber(record[2]) or now
local last_peers = tonumber(record[3])
local found = tonumber(ARGV[10]) > 0
if found then last_peers = now end
local pin = record[4]
local pinned = pin == 'forever' or (tonumber(pin) ~= nil and tonumber(pin) > now)
local reason, grace_end = 'never had peers', first_visit + tonumber(ARGV[15])
if last_peers then reason, grace_end = 'lost its peers', last_peers + tonumber(ARGV[16]) end
local new = score * mult
local evict = false
if new < threshold then
  if ARGV[12] == 'none' then
    evict = not pinned and now >= grace_end
  else
    -- peers, but not enough new ones: contract §2's low score, for a torrent that
    -- sank there; one held at the threshold stays held while it has peers
    evict = not pinned and score > threshold
    reason = 'low score'
  end
  -- held: the next visit without peers brings it below again
  if not evict then new = threshold end
end
local text = string.format('%.17g', new)
-- at risk after this visit: the time from which a visit without peers evicts it ('' = not)
local risk = ''
if not evict and not pinned and new * tonumber(ARGV[17]) < threshold then
  risk = string.format('%.17g', grace_end)
end
redis.call('ZREM', KEYS[1], h)
redis.call('HDEL', KEYS[10], h)
local fields = {'visits', visits + 1, 'last_visit', ARGV[5], 'peers_last_visit', ARGV[10],
  'last_outcome', ARGV[12], 'score', text}
if not record[2] then fields[#fields + 1] = 'first_visit'; fields[#fields + 1] = ARGV[5] end
if found then fields[#fields + 1] = 'last_peers'; fields[#fields + 1] = ARGV[5] end
if risk ~= (record[5] or '') then fields[#fields + 1] = 'at_risk'; fields[#fields + 1] = risk end
if ARGV[8] ~= '' then fields[#fields + 1] = 'seeders'; fields[#fields + 1] = ARGV[8] end
if ARGV[9] ~= '' then fields[#fields + 1] = 'leechers'; fields[#fields + 1] = ARGV[9] end
if ARGV[18] ~= '' then fields[#fields + 1] = 'reported'; fields[#fields + 1] = ARGV[18] end
redis.call('HSET', KEYS[7], unpack(fields))
if ARGV[18] == '' and record[6] then redis.call('HDEL', KEYS[7], 'reported') end
if ARGV[21] == '1' then
  redis.call('HSET', KEYS[7], 'counts_estimated', '1')
elseif record[8] then
  redis.call('HDEL', KEYS[7], 'counts_estimated')
end
local day = math.floor(tonumber(ARGV[20]))
local previous = tonumber(record[7])
if previous then  -- the days that left the 30-day window since the previous visit
  local gone = {}
  local last = math.floor(previous / 86400)  -- fields exist for last - 29 .. last only
  for d = last - 29, math.min(last, day - 30) do gone[#gone + 1] = 'n:' .. d end
  if #gone > 0 then redis.call('HDEL', KEYS[7], unpack(gone)) end
end
if tonumber(ARGV[19]) > 0 then redis.call('HINCRBY', KEYS[7], 'n:' .. day, math.floor(tonumber(ARGV[19]))) end
redis.call('HINCRBY', KEYS[9], ARGV[11], 1)
if ARGV[14] and ARGV[14] ~= '' then redis.call('HINCRBY', KEYS[12], ARGV[14], 1) end
if ARGV[18] ~= '' and tonumber(ARGV[18]) > 0 then
  redis.call('HINCRBY', KEYS[12], 'cc:' .. ARGV[11], ARGV[10])
  redis.call('HINCRBY', KEYS[12], 'cr:' .. ARGV[11], math.floor(tonumber(ARGV[18])))
end
if kept > 0 then
  local function u32(v)  -- a count as stored; '' (not reported) and anything past u32 as 0xFFFFFFFF
    local x = tonumber(v)
    if x == nil or x < 0 or x >= 4294967295 then return 4294967295 end
    return math.floor(x)
  end
  local t = math.max(0, math.min(math.floor(tonumber(ARGV[5])), 4294967295))
  local entry = struct.pack('<IfIII', t, new, u32(ARGV[10]), u32(ARGV[8]), u32(ARGV[9]))
  -- pcall: a key of another type fails here, after the writes above, so it is replaced whole
  local len = redis.pcall('SETRANGE', KEYS[11], 20 * (visits % kept), entry)
  if type(len) ~= 'number' or len % 20 ~= 0 then
    redis.call('SET', KEYS[11], entry)  -- not a history this script wrote: started again
  elseif len > 20 * kept then
    -- written when more visits were kept: cut to the ring's new size
    redis.call('SET', KEYS[11], redis.call('GETRANGE', KEYS[11], 0, 20 * kept - 1))
  end
else
  redis.call('DEL', KEYS[11])
end
if evict then
  redis.call('HDEL', KEYS[2], h)
  if record[5] and record[5] ~= '' then redis.call('ZREM', KEYS[13], h) end
  redis.call('ZADD', KEYS[5], ARGV[5], h)
  redis.call('HSET', KEYS[6], h, cjson.encode({reason = reason, at = now, score = text,
    last_peers = last_peers or cjson.null}))
  redis.call('EXPIRE', KEYS[7], ARGV[7])
  redis.call('EXPIRE', KEYS[8], ARGV[7])
  if kept > 0 then redis.call('EXPIRE', KEYS[11], ARGV[7]) end
  return {'evicted', text}
end
redis.call('HSET', KEYS[2], h, text)
redis.call('ZADD', KEYS[4], ARGV[6], h)
for j = 15, #KEYS do redis.call('ZADD', KEYS[j], 'XX', ARGV[6], h) end  -- only its lane's set has it
if risk ~= (record[5] or '') then
  if risk ~= '' then
    redis.call('ZADD', KEYS[13], risk, h)
  else
    redis.call('ZREM', KEYS[13], h)
  end
end
return {'cooling', text}
