-- complete.lua: finish visits that some source answered (contract §1, §2).
-- A visit's new score is the held score times its multiplier; below the
-- threshold the torrent is evicted (its tombstone kept the tombstone
-- seconds), else it cools until its due time.
-- Staged eviction (torrents that never had a peer get a grace, docs/decisions.md): a visit without peers evicts
-- only once the torrent's stage's grace has run (from its first visit for a
-- torrent never seen with a peer, "never had peers"; from the last peer seen
-- for one that had some, "lost its peers"), and a
-- pinned torrent (torrent field `pinned`: "forever" or a unix time until
-- which it holds) never; until then its score is held at the threshold. A
-- visit with peers below the threshold evicts for "low score" (contract §2)
-- unless pinned or held (its peers came back: it stays held while it has
-- peers, and leaves the threshold with a full and fresh visit). A torrent
-- one more visit without peers would bring below the threshold is "at
-- risk": KEYS[10] holds it with the time from which that visit evicts it.
-- A completion ends the torrent's streak of expired leases. The history
-- string keeps the torrent's last `kept` visits, 20 bytes each
-- (little-endian u32 time, f32 new score, u32 peers, u32 seeders, u32
-- leechers; 0xFFFFFFFF: not reported); 0 keeps none. A ring: a visit
-- overwrites entry `visits mod kept` with one SETRANGE, unread (readers
-- order the entries by time and skip those of time 0, the padding of a ring
-- begun past its start), so a completion copies 20 bytes, not the whole
-- history twice. A string of its own: as a field of the torrent hash it would
-- pass the 64-byte listpack limit and cost the hash ~700 bytes more in a
-- hashtable.
--
-- One call completes a batch of visits of one shard (a worker's completions
-- gathered meanwhile, workers/completions.py): the shard's keys, the
-- settings and the per-minute counts are read and written once a call, and
-- each visit's own steps are as they would be alone. Each visit is
-- answered on its own; a visit of a torrent already completed earlier in the
-- same call is answered 'stale'.
--
-- KEYS[1]  leases     ZSET info-hash -> lease deadline
-- KEYS[2]  held       HASH info-hash -> score while out of ready
-- KEYS[3]  claims     HASH info-hash -> times claimed (the lease token)
-- KEYS[4]  cooling    ZSET info-hash -> due time
-- KEYS[5]  evicted    ZSET info-hash -> eviction time
-- KEYS[6]  tombstones HASH info-hash -> JSON {reason, at, score}
-- KEYS[7]  visits     HASH unix minute -> visits completed
-- KEYS[8]  expiries   HASH info-hash -> leases expired in a row
-- KEYS[9]  rates      HASH per-minute counts (crawler/queue/rates.py)
-- KEYS[10] atrisk     ZSET info-hash -> time from which a visit without peers evicts it
-- KEYS[11..13] member sets of the high, low and discovered lanes: a torrent
--          back to cooling gets its due time in those its visit names
--          (claim.lua's due index of its lane)
-- KEYS[14 + 4(i - 1) ..] visit i's torrent: its torrent HASH (visits,
--          last_visit, seeders, ...), trackers SET, history STRING and
--          source notes HASH (keys.tracker_min_interval)
--
-- ARGV[1] threshold, ARGV[2] tombstone seconds, ARGV[3] visits kept in the
-- history (0-10000), ARGV[4] and ARGV[5] the graces (seconds) of a torrent
-- never seen with a peer and of one that lost its peers, ARGV[6] the
-- multiplier of a visit without peers; then per visit, from ARGV[p]: m, the
-- count of its arguments after it, then (p + j for j =)
--  1 info-hash, 2 token, 3 multiplier, 4 now, 5 due time, 6 seeders ('' unknown),
--  7 leechers ('' unknown), 8 peers found, 9 minute, 10 outcome (none/some/full),
--  11 the rates field of this visit's round trip ('' when its claim time is
--  unknown), 12 the swarm size the visit's sources reported ('' unknown),
--  13 the IPs this visit counted for the first time in the dedupe window (the
--  recorder's answer), 14 the visit's unix day, 15 '1' when the seeders and
--  leechers are the DHT's estimates (BEP 33), else '0' (the torrent hash's
--  `counts_estimated` is kept only while they are), 16 the member sets its
--  due time goes to (digits 1-3 of KEYS[11..13]; '' none), 17 .. m the
--  visit's source notes as note.lua takes them from its ARGV[1]
--  (notes_write.lua: life, n, n field-value pairs, fields to drop), or ''
--  for none. They are written first, whatever the lease's state: the sources
--  were asked, and a stale lease does not make their min intervals any shorter.
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
-- Returns per visit {'cooling'|'evicted', new score as string}, {'stale'}
-- when the lease is not this holder's any more (nothing changed but the
-- notes), or {'error', why} when a stored value it reads is damaged
-- (nothing of that visit changed but the notes). Every argument of every
-- visit is checked before the first write: one malformed refuses the call.

--! include slices  (STEP, each, read)
--! include notes_write  (notes_bad, write_notes)

local SHARD_KEYS, FIXED = 13, 16  -- KEYS before the visits'; a visit's arguments before its notes
-- A number every command and cjson here take: tonumber also accepts NaN and the infinities
-- (ZADD refuses the first, cjson and the counts' floors the others) and blanks around the
-- digits (Redis refuses them). Checked before any write, so none fails after one.
local function number(v)
  local x = tonumber(v)
  return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge and not string.find(v, '%s')
end
local function whole(v)  -- a count HINCRBY and EXPIRE take: digits, within a 64-bit integer
  return string.match(v, '^%d+$') ~= nil and #v <= 15
end
local threshold, tombstone, kept = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local never_grace, lost_grace, mult_none = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local function u32(v)  -- a count as stored; '' (not reported) and anything past u32 as 0xFFFFFFFF
  local x = tonumber(v)
  if x == nil or x < 0 or x >= 4294967295 then return 4294967295 end
  return math.floor(x)
end
local function bad() return redis.error_reply('complete.lua: bad arguments') end
if not (threshold and whole(tombstone) and kept) or kept < 0 or kept > 10000 or kept % 1 ~= 0
    or not number(ARGV[1]) or not number(ARGV[4]) or not number(ARGV[5]) or not number(ARGV[6]) then
  return bad()
end

-- Every visit's arguments checked before the first write: ``starts[i]`` is
-- where visit i's begin (its m), ``ends[i]`` its last.
local starts, ends = {}, {}
local p = 7
while p <= #ARGV do
  local m = tonumber(ARGV[p])
  if not m or m % 1 ~= 0 or m < FIXED + 1 or p + m > #ARGV then return bad() end
  local a = p
  if not (number(ARGV[a + 3]) and number(ARGV[a + 4]) and number(ARGV[a + 5]) and whole(ARGV[a + 8])
      and tonumber(ARGV[a + 9]))
      or (ARGV[a + 6] ~= '' and not tonumber(ARGV[a + 6])) or (ARGV[a + 7] ~= '' and not tonumber(ARGV[a + 7]))
      or (ARGV[a + 11] ~= '' and not string.match(ARGV[a + 11], '^rt:%d+:%d+$'))
      or (ARGV[a + 12] ~= '' and not whole(ARGV[a + 12]))
      or not whole(ARGV[a + 13]) or not number(ARGV[a + 14])
      or (ARGV[a + 15] ~= '0' and ARGV[a + 15] ~= '1') or not string.match(ARGV[a + 16], '^[123]*$')
      or (ARGV[a + 17] ~= '' and notes_bad(a + 17, a + m))
      or (ARGV[a + 17] == '' and m ~= FIXED + 1) then
    return bad()
  end
  starts[#starts + 1], ends[#ends + 1] = a, a + m
  p = a + m + 1
end
if #KEYS ~= SHARD_KEYS + 4 * #starts then return bad() end

local done = {}  -- info-hashes completed in this call
local minutes = {}  -- minute -> visits completed in it by this call (false: its stored count is damaged)
local noted = {}  -- visit -> its notes are written
local adds = {}  -- rates field -> what this call adds to it
local gone, cooled, held, evicted = {}, {}, {}, {}  -- this call's shard writes, gathered
local members = {{}, {}, {}}

-- The visits' lease tokens, lease deadlines and held scores, a command each for all of them
local hashes = {}
for i = 1, #starts do hashes[i] = ARGV[starts[i] + 1] end
local tokens, deadlines, scores = read('HMGET', KEYS[3], hashes), read('ZMSCORE', KEYS[1], hashes),
  read('HMGET', KEYS[2], hashes)

-- What visit i finds, read before any write of the call: its answer when it
-- ends there ({'stale'} or {'error', why}), else nil and its torrent's record.
local function look(i)
  local a, k = starts[i], SHARD_KEYS + 4 * (i - 1)
  local h = ARGV[a + 1]
  if ARGV[a + 17] ~= '' then
    local kind = redis.call('TYPE', KEYS[k + 4]).ok
    if kind ~= 'hash' and kind ~= 'none' then
      return {'error', 'complete.lua: the source notes of ' .. h .. ' are not a hash'}
    end
    noted[i] = true
  end
  if done[h] or tokens[i] ~= ARGV[a + 2] or not deadlines[i] then return {'stale'} end
  local at = ARGV[a + 9]
  if minutes[at] == nil then
    minutes[at] = tonumber(redis.call('HGET', KEYS[7], at) or '0') and 0 or false
  end
  local score = tonumber(scores[i] or '1')
  -- the torrent's record: visits, and the stages of staged eviction (`at_risk`:
  -- the time it is in KEYS[10] with, so the set is written only when that changes)
  local record = redis.pcall('HMGET', KEYS[k + 1], 'visits', 'first_visit', 'last_peers', 'pinned', 'at_risk',
    'reported', 'last_visit', 'counts_estimated', 'n:' .. math.floor(tonumber(ARGV[a + 14])))
  if record.err then return {'error', 'complete.lua: the torrent record of ' .. h .. ' is not a hash'} end
  local visits, today = tonumber(record[1] or '0'), tonumber(record[9] or '0')
  if not score or not visits or not minutes[at] or not today or today % 1 ~= 0 then
    return {'error', 'complete.lua: a stored score or count of ' .. h .. ' is not a number'}
  end
  done[h] = true
  record.score, record.visits, record.today = score, visits, today
  return nil, record
end

-- Visit i's own writes (``record``: what ``look`` read); its shard writes go to the tables above.
local function complete(i, record)
  local a = starts[i]
  local k = SHARD_KEYS + 4 * (i - 1)
  local h = ARGV[a + 1]
  local score, visits, at = record.score, record.visits, ARGV[a + 9]
  local now, when = tonumber(ARGV[a + 4]), ARGV[a + 4]
  local peers, seeders, leechers, reported = ARGV[a + 8], ARGV[a + 6], ARGV[a + 7], ARGV[a + 12]
  local first_visit = tonumber(record[2]) or now
  local last_peers = tonumber(record[3])
  local found = tonumber(peers) > 0
  if found then last_peers = now end
  local pin = record[4]
  local pinned = pin == 'forever' or (tonumber(pin) ~= nil and tonumber(pin) > now)
  local reason, grace_end = 'never had peers', first_visit + never_grace
  if last_peers then reason, grace_end = 'lost its peers', last_peers + lost_grace end
  local new = score * tonumber(ARGV[a + 3])
  local evict = false
  if new < threshold then
    if ARGV[a + 10] == 'none' then
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
  if not evict and not pinned and new * mult_none < threshold then
    risk = string.format('%.17g', grace_end)
  end
  gone[#gone + 1] = h
  local fields = {'visits', visits + 1, 'last_visit', when, 'peers_last_visit', peers,
    'last_outcome', ARGV[a + 10], 'score', text}
  if not record[2] then fields[#fields + 1] = 'first_visit'; fields[#fields + 1] = when end
  if found then fields[#fields + 1] = 'last_peers'; fields[#fields + 1] = when end
  if risk ~= (record[5] or '') then fields[#fields + 1] = 'at_risk'; fields[#fields + 1] = risk end
  if seeders ~= '' then fields[#fields + 1] = 'seeders'; fields[#fields + 1] = seeders end
  if leechers ~= '' then fields[#fields + 1] = 'leechers'; fields[#fields + 1] = leechers end
  if reported ~= '' then fields[#fields + 1] = 'reported'; fields[#fields + 1] = reported end
  if ARGV[a + 15] == '1' then fields[#fields + 1] = 'counts_estimated'; fields[#fields + 1] = '1' end
  local day = math.floor(tonumber(ARGV[a + 14]))
  local counted = tonumber(ARGV[a + 13])
  if counted > 0 then  -- the day's IPs, as read by ``look``: set with the rest
    fields[#fields + 1] = 'n:' .. day; fields[#fields + 1] = string.format('%d', record.today + math.floor(counted))
  end
  redis.call('HSET', KEYS[k + 1], unpack(fields))
  local drop = {}
  if reported == '' and record[6] then drop[#drop + 1] = 'reported' end
  if ARGV[a + 15] ~= '1' and record[8] then drop[#drop + 1] = 'counts_estimated' end
  local previous = tonumber(record[7])
  if previous then  -- the days that left the 30-day window since the previous visit
    local last_day = math.floor(previous / 86400)  -- fields exist for last_day - 29 .. last_day only
    for d = last_day - 29, math.min(last_day, day - 30) do drop[#drop + 1] = 'n:' .. d end
  end
  if #drop > 0 then redis.call('HDEL', KEYS[k + 1], unpack(drop)) end
  minutes[at] = minutes[at] + 1
  local rt = ARGV[a + 11]
  if rt ~= '' then adds[rt] = (adds[rt] or 0) + 1 end
  if reported ~= '' and tonumber(reported) > 0 then
    adds['cc:' .. at] = (adds['cc:' .. at] or 0) + tonumber(peers)
    adds['cr:' .. at] = (adds['cr:' .. at] or 0) + math.floor(tonumber(reported))
  end
  local history = KEYS[k + 3]
  if kept > 0 then
    local t = math.max(0, math.min(math.floor(now), 4294967295))
    local entry = struct.pack('<IfIII', t, new, u32(peers), u32(seeders), u32(leechers))
    -- pcall: a key of another type fails here, after the writes above, so it is replaced whole
    local len = redis.pcall('SETRANGE', history, 20 * (visits % kept), entry)
    if type(len) ~= 'number' or len % 20 ~= 0 then
      redis.call('SET', history, entry)  -- not a history this script wrote: started again
    elseif len > 20 * kept then
      -- written when more visits were kept: cut to the ring's new size
      redis.call('SET', history, redis.call('GETRANGE', history, 0, 20 * kept - 1))
    end
  else
    redis.call('DEL', history)
  end
  if evict then
    evicted[#evicted + 1] = h
    if record[5] and record[5] ~= '' then redis.call('ZREM', KEYS[10], h) end
    redis.call('ZADD', KEYS[5], when, h)
    redis.call('HSET', KEYS[6], h, cjson.encode({reason = reason, at = now, score = text,
      last_peers = last_peers or cjson.null}))
    redis.call('EXPIRE', KEYS[k + 1], tombstone)
    redis.call('EXPIRE', KEYS[k + 2], tombstone)
    if kept > 0 then redis.call('EXPIRE', history, tombstone) end
    return {'evicted', text}
  end
  local due = ARGV[a + 5]
  held[#held + 1] = h; held[#held + 1] = text
  cooled[#cooled + 1] = due; cooled[#cooled + 1] = h
  for d in string.gmatch(ARGV[a + 16], '%d') do
    local set = members[tonumber(d)]
    set[#set + 1] = due; set[#set + 1] = h
  end
  if risk ~= (record[5] or '') then
    if risk ~= '' then
      redis.call('ZADD', KEYS[10], risk, h)
    else
      redis.call('ZREM', KEYS[10], h)
    end
  end
  return {'cooling', text}
end

local replies, found = {}, {}
for i = 1, #starts do replies[i], found[i] = look(i) end
for i = 1, #starts do
  if noted[i] then write_notes(KEYS[SHARD_KEYS + 4 * i], starts[i] + 17, ends[i]) end
  if found[i] then replies[i] = complete(i, found[i]) end
end
-- the shard's writes of every visit completed, once a call (in slices: a batch may be large)
each('ZREM', KEYS[1], gone)
each('HDEL', KEYS[8], gone)
each('HDEL', KEYS[2], evicted)
if #held > 0 then each('HSET', KEYS[2], held) end
if #cooled > 0 then each('ZADD', KEYS[4], cooled) end
for j = 1, 3 do  -- only its lane's set has a torrent: XX
  local list = members[j]
  for i = 1, #list, STEP do redis.call('ZADD', KEYS[10 + j], 'XX', unpack(list, i, math.min(i + STEP - 1, #list))) end
end
for at, n in pairs(minutes) do
  if n and n > 0 then redis.call('HINCRBY', KEYS[7], at, n) end
end
for field, n in pairs(adds) do redis.call('HINCRBY', KEYS[9], field, n) end
return replies
