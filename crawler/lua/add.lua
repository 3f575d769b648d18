-- add.lua: admit a batch of torrents to the queue (SPEC §1).
--
-- KEYS[1] ready       ZSET info-hash -> score
-- KEYS[2] cooling     ZSET info-hash -> due time
-- KEYS[3] leases      ZSET info-hash -> lease deadline
-- KEYS[4] evicted     ZSET info-hash -> eviction time
-- KEYS[5] tombstones  HASH info-hash -> JSON {reason, at, score}
-- KEYS[6] quarantined ZSET info-hash -> quarantine time
-- KEYS[7] quarantine  HASH info-hash -> JSON {reason, at, expiries, score}
-- KEYS[8] expiries    HASH info-hash -> leases expired in a row
-- KEYS[9..]         the torrent HASH, trackers SET and history STRING of each
--                   item that has trackers, or of every item when
--                   re-admitting (only those items' keys are touched, so the
--                   others need none)
--
-- ARGV[1] now, ARGV[2] readmit (1/0), ARGV[3] most trackers one torrent keeps
-- then per item: info-hash, number of trackers k, k tracker URLs
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
-- so) and the next claims move it into the ready set. A tracked torrent
-- keeps its score and state; a re-admitted quarantined one keeps its held
-- score.
--
-- The whole batch is parsed and checked, and every state and tracker set
-- read, before the first write; every multi-value command is sliced (Lua's
-- stack holds ~8,000 unpacked values), so no batch fails halfway.

--! include slices  (STEP, each, read)

local now = ARGV[1]
local readmit = ARGV[2] == '1'
local cap = tonumber(ARGV[3])
if not tonumber(now) or tonumber(now) ~= tonumber(now) or not cap or cap < 0 then  -- x ~= x: NaN
  return redis.error_reply('add.lua: bad arguments')
end

-- Parse and size the batch.
local items, hashes = {}, {}
local nkeys = 8
local a = 4
while a <= #ARGV do
  local h, k = ARGV[a], tonumber(ARGV[a + 1])
  if #h ~= 40 or not k or k < 0 or k ~= math.floor(k) or a + 1 + k > #ARGV then
    return redis.error_reply('add.lua: malformed item at argument ' .. a)
  end
  local item = {h = h, first = a + 2, k = k}
  if k > 0 or readmit then
    item.tkey, item.trkey, item.hkey = KEYS[nkeys + 1], KEYS[nkeys + 2], KEYS[nkeys + 3]
    nkeys = nkeys + 3
  end
  items[#items + 1] = item
  hashes[#hashes + 1] = h
  a = a + 2 + k
end
if nkeys ~= #KEYS then
  return redis.error_reply('add.lua: ' .. #KEYS .. ' keys for a batch that needs ' .. nkeys)
end
if #items == 0 then return {'', {}} end

-- Read every state of the batch.
local ev = read('ZMSCORE', KEYS[4], hashes)
local rd = read('ZMSCORE', KEYS[1], hashes)
local co = read('ZMSCORE', KEYS[2], hashes)
local le = read('ZMSCORE', KEYS[3], hashes)
local qu = read('ZMSCORE', KEYS[6], hashes)

local out, dropped = {}, {}
local due = {}                    -- ZADD arguments: due time, member, ...
local unevict, unquarantine = {}, {}
local persist = {}                -- keys whose eviction expiry is lifted
local seen = {}
local sets = {}                   -- trackers key -> {count, planned = {url = true}, adds = {}}
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
    if status == 'a' or status == 'r' or status == 'q' then
      due[#due + 1] = now
      due[#due + 1] = h
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
each('ZADD', KEYS[2], due)
return {table.concat(out), dropped}
