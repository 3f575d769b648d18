-- add.lua: admit a batch of torrents to the queue (contract §1).
--
-- KEYS[1] ready       ZSET info-hash -> score
-- KEYS[2] cooling     ZSET info-hash -> due time
-- KEYS[3] leases      ZSET info-hash -> lease deadline
-- KEYS[4] evicted     ZSET info-hash -> eviction time
-- KEYS[5] tombstones  HASH info-hash -> JSON {reason, at, score}
-- KEYS[6] quarantined ZSET info-hash -> quarantine time
-- KEYS[7] quarantine  HASH info-hash -> JSON {reason, at, expiries, score}
-- KEYS[8] expiries    HASH info-hash -> leases expired in a row
-- KEYS[9..11]  the ready ZSETs of the high, low and discovered lanes (KEYS[1] is
--              the normal lane's)
-- KEYS[12..14] the members of the high, low and discovered lanes (info-hash ->
--              its due time while it cools, else 0: claim.lua's due index)
-- KEYS[15] since       ZSET info-hash -> time it became ready
-- KEYS[16..]        the torrent HASH, trackers SET and history STRING of each
--                   item that has trackers or a name, or of every item when
--                   re-admitting (only those items' keys are touched, so the
--                   others need none)
--
-- ARGV[1] now, ARGV[2] readmit (1/0), ARGV[3] most trackers one torrent keeps,
-- ARGV[4] the lane (high, normal, low, discovered; '' keeps every tracked
-- torrent's lane and puts new ones in normal), ARGV[5] 1: move tracked
-- torrents into that lane too (add --lane), 0: only new and re-admitted ones
-- (discovery); then per item: info-hash, its name ('' none; at most
-- MAX_NAME bytes, crawler/torrents/torrent_names.py), number of trackers k, k
-- tracker URLs
--
-- Returns {letters, dropped}: one letter per item: a = added, t = already
-- tracked (trackers merged), e = evicted and skipped, r = evicted and
-- re-admitted, Q = quarantined and skipped (trackers merged), q =
-- quarantined and re-admitted (score kept); dropped is a flat list
-- {item index, trackers not stored, ...} for the items whose tracker set
-- was full (ARGV[3]).
--
-- A new torrent enters the due queue (cooling, due now) with no held score,
-- which means score 1.0: it is ready from this instant (status counts it
-- so) and the next claims move it into the ready set. A new torrent of the
-- high, low or discovered lane enters its lane's ready set at once (score
-- 1.0): claims move the due queue oldest first, so a bulk add to one lane
-- would otherwise hide the torrents of a higher lane added after it
-- (claim.lua finds a marked lane's due torrents through its index, but the
-- normal lane has none). A tracked torrent keeps its score and state; a
-- re-admitted quarantined one keeps its held score.
--
-- Names: an item's name becomes the `name` field of its torrent HASH when
-- the hash has none (the batch's first name of a torrent wins); a name never
-- replaces one. An item skipped as evicted stores none, as it merges no
-- trackers. A new torrent's hash loses any expiry left from an earlier
-- eviction (its tombstone forgotten a moment before the key), so the name
-- lives as long as the torrent.
--
-- The whole batch is parsed and checked, and every state and tracker set
-- read, before the first write; every multi-value command is sliced (Lua's
-- stack holds ~8,000 unpacked values), so no batch fails halfway.

--! include slices  (STEP, each, read)

local MAX_NAME = 800  -- torrent_names.MAX_BYTES: 200 characters of UTF-8
local now = ARGV[1]
local readmit = ARGV[2] == '1'
local cap = tonumber(ARGV[3])
local LANES = {high = 1, normal = 2, low = 3, discovered = 4}
local lane, move = ARGV[4], ARGV[5] == '1'
if not tonumber(now) or tonumber(now) ~= tonumber(now) or not cap or cap < 0  -- x ~= x: NaN
    or (lane ~= '' and not LANES[lane]) or (ARGV[5] ~= '0' and ARGV[5] ~= '1') then
  return redis.error_reply('add.lua: bad arguments')
end
-- lane l: ready_of[l], members_of[l] (nil for normal)
local ready_of = {KEYS[9], KEYS[1], KEYS[10], KEYS[11]}
local members_of = {KEYS[12], nil, KEYS[13], KEYS[14]}

-- Parse and size the batch.
local items, hashes = {}, {}
local nkeys = 15
local a = 6
while a <= #ARGV do
  local h, name, k = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  if #h ~= 40 or not name or #name > MAX_NAME or not k or k < 0 or k ~= math.floor(k)
      or a + 2 + k > #ARGV then
    return redis.error_reply('add.lua: malformed item at argument ' .. a)
  end
  local item = {h = h, name = name, first = a + 3, k = k}
  if k > 0 or readmit or name ~= '' then
    item.tkey, item.trkey, item.hkey = KEYS[nkeys + 1], KEYS[nkeys + 2], KEYS[nkeys + 3]
    nkeys = nkeys + 3
  end
  items[#items + 1] = item
  hashes[#hashes + 1] = h
  a = a + 3 + k
end
if nkeys ~= #KEYS then
  return redis.error_reply('add.lua: ' .. #KEYS .. ' keys for a batch that needs ' .. nkeys)
end
if #items == 0 then return {'', {}} end

-- Read every state of the batch.
local ev = read('ZMSCORE', KEYS[4], hashes)
-- rd[i]: the score of a ready item, in_ready[i] its lane's number; lane_now[i]: its lane's number
local rd, in_ready, lane_now = {}, {}, {}
for l = 1, 4 do
  local got = read('ZMSCORE', ready_of[l], hashes)
  local member = members_of[l] and read('ZMSCORE', members_of[l], hashes)
  for i = 1, #hashes do
    if got[i] then rd[i], in_ready[i] = got[i], l end
    if member and member[i] then lane_now[i] = l end
  end
end
local co = read('ZMSCORE', KEYS[2], hashes)
local le = read('ZMSCORE', KEYS[3], hashes)
local qu = read('ZMSCORE', KEYS[6], hashes)

local out, dropped = {}, {}
local due = {}                    -- ZADD arguments: due time, member, ...
local since = {}                  -- ZADD arguments of the since set: now, member, ...
local unevict, unquarantine = {}, {}
local persist = {}                -- keys whose eviction expiry is lifted
local seen = {}
local sets = {}                   -- trackers key -> {count, planned = {url = true}, adds = {}}
local named, names = {}, {}       -- torrent keys whose name is decided; HSET arguments: key, name, ...
local fresh_named = {}            -- the hash keys of new torrents given a name: their expiry lifted
local to = LANES[lane]            -- the lane number items go to (nil: none given)
local unmark, mark = {{}, {}, {}, {}}, {{}, {}, {}, {}}   -- member sets: ZREM / ZADD (score, h) per lane
local unready, reready = {{}, {}, {}, {}}, {{}, {}, {}, {}} -- ready sets: ZREM / ZADD (score, h) per lane
for i, item in ipairs(items) do
  local h = item.h
  local status
  if seen[h] then
    status = (seen[h] == 'e' or seen[h] == 'Q') and seen[h] or 't'
  elseif ev[i] then
    status = readmit and 'r' or 'e'
  elseif qu[i] then
    status = readmit and 'q' or 'Q'
  elseif rd[i] or co[i] or le[i] then
    status = 't'
  else
    status = 'a'
  end
  if not seen[h] then
    local from = lane_now[i] or 2
    local fresh = status == 'a' or status == 'r' or status == 'q'
    local moving = to and to ~= from and status ~= 'e' and (move or fresh)
    local into = moving and to or from
    local direct = status == 'a' and members_of[into] ~= nil  -- new, of a marked lane: ready at once
    if direct then
      table.insert(reready[into], '1')
      table.insert(reready[into], h)
      since[#since + 1] = now
      since[#since + 1] = h
    elseif fresh then
      due[#due + 1] = now
      due[#due + 1] = h
    end
    -- its score in its lane's member set: its due time while it cools (claim.lua's due index)
    local cools = (fresh and not direct) and now or co[i] or 0
    if moving then
      if members_of[from] then table.insert(unmark[from], h) end
      if members_of[to] then
        table.insert(mark[to], cools)
        table.insert(mark[to], h)
      end
      if in_ready[i] then
        table.insert(unready[in_ready[i]], h)
        table.insert(reready[to], rd[i])
        table.insert(reready[to], h)
      end
    elseif fresh and members_of[from] then  -- admitted again in its lane
      table.insert(mark[from], cools)
      table.insert(mark[from], h)
    end
    if status == 'r' then
      unevict[#unevict + 1] = h
      persist[#persist + 1] = item.tkey
      persist[#persist + 1] = item.trkey
      persist[#persist + 1] = item.hkey
    elseif status == 'q' then
      unquarantine[#unquarantine + 1] = h
    end
  end
  if item.k > 0 and status ~= 'e' then
    local set = sets[item.trkey]
    if not set then
      set = {count = redis.call('SCARD', item.trkey), planned = {}, adds = {}}
      sets[item.trkey] = set
    end
    local urls = {}
    for j = item.first, item.first + item.k - 1 do urls[#urls + 1] = ARGV[j] end
    local member = read('SMISMEMBER', item.trkey, urls)
    local lost = 0
    for j = 1, #urls do
      local u = urls[j]
      if member[j] == 0 and not set.planned[u] then
        if set.count < cap then
          set.planned[u] = true
          set.count = set.count + 1
          set.adds[#set.adds + 1] = u
        else
          lost = lost + 1
        end
      end
    end
    if lost > 0 then
      dropped[#dropped + 1] = i
      dropped[#dropped + 1] = lost
    end
  end
  if item.name ~= '' and status ~= 'e' and not named[item.tkey] then
    named[item.tkey] = true
    if redis.call('HEXISTS', item.tkey, 'name') == 0 then
      names[#names + 1] = item.tkey
      names[#names + 1] = item.name
    end
    if (seen[h] or status) == 'a' then fresh_named[#fresh_named + 1] = item.tkey end
  end
  seen[h] = seen[h] or status
  out[i] = status
end

-- Writes.
each('ZREM', KEYS[4], unevict)
each('HDEL', KEYS[5], unevict)
for j = 1, #persist do redis.call('PERSIST', persist[j]) end
each('ZREM', KEYS[6], unquarantine)
each('HDEL', KEYS[7], unquarantine)
each('HDEL', KEYS[8], unquarantine)
for key, set in pairs(sets) do each('SADD', key, set.adds) end
for j = 1, #names, 2 do redis.call('HSET', names[j], 'name', names[j + 1]) end
for j = 1, #fresh_named do redis.call('PERSIST', fresh_named[j]) end
each('ZADD', KEYS[2], due)
each('ZADD', KEYS[15], since)
for l = 1, 4 do
  if members_of[l] then
    each('ZREM', members_of[l], unmark[l])
    each('ZADD', members_of[l], mark[l])
  end
  each('ZREM', ready_of[l], unready[l])
  each('ZADD', ready_of[l], reready[l])
end
return {table.concat(out), dropped}
