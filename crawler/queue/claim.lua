-- claim.lua: lease the highest-scored ready torrents (contract §1), after
-- bounded housekeeping every claimer shares. Its steps:
--   1. expired leases go back to ready with their score unchanged, or, at
--      the K-th expiry in a row without a completion, to quarantined;
--   2. cooling torrents whose due time has come (new ones are due at once)
--      go to ready;
--   3. tombstones older than the tombstone period are forgotten.
-- Each is bounded by ARGV[4] per call so one claim never holds Redis long.
--
-- Every argument is checked, everything read and every stored value the
-- writes depend on checked before the first write, and every multi-value
-- command is sliced (Lua's stack holds ~8,000 unpacked values; Redis keeps
-- the writes a failing script made before it failed). So the claim is
-- chosen in memory: the top n of ready (ZREVRANGE) merged with the torrents
-- this call's housekeeping brings to ready, ordered as ZPOPMAX would.
--
-- KEYS[1]  ready       ZSET info-hash -> score
-- KEYS[2]  since       ZSET info-hash -> time it became ready
-- KEYS[3]  cooling     ZSET info-hash -> due time
-- KEYS[4]  leases      ZSET info-hash -> lease deadline
-- KEYS[5]  evicted     ZSET info-hash -> eviction time
-- KEYS[6]  tombstones  HASH info-hash -> JSON {reason, at, score}
-- KEYS[7]  held        HASH info-hash -> score while out of ready
--                      (absent: 1.0, a new torrent)
-- KEYS[8]  claims      HASH info-hash -> times claimed (the lease token)
-- KEYS[9]  expiries    HASH info-hash -> leases expired in a row
-- KEYS[10] quarantined ZSET info-hash -> quarantine time
-- KEYS[11] quarantine  HASH info-hash -> JSON {reason, at, expiries, score}
-- KEYS[12] rates       HASH per-minute counts (crawler/queue/rates.py)
-- KEYS[13..15] the ready ZSETs of the high, low and discovered lanes (KEYS[1]
--          is the normal lane's)
-- KEYS[16..18] the members of the high, low and discovered lanes (ZSETs,
--          info-hash -> its due time while it cools, else 0; a torrent in
--          none is in the normal lane)
-- KEYS[19] lane credit HASH lane -> claims owed to it (its guaranteed share)
--
-- ARGV[1] now, ARGV[2] lease deadline, ARGV[3] how many to claim,
-- ARGV[4] housekeeping budget, ARGV[5] tombstone cutoff (evicted before it
-- are forgotten), ARGV[6] K: expiries in a row that quarantine a torrent,
-- ARGV[7] the unix minute of now, ARGV[8] torrents this claim asked for
-- (counted once per claim: 0 for the next shards of a claim spread over
-- several, and for housekeeping), ARGV[9] the share of claims each lane below
-- the first non-empty one is guaranteed (crawler/queue/lanes.py), ARGV[10] "1": stop
-- when the lane the claim began in runs out (a sharded claim then goes on in
-- the shard offering the next best, so a higher lane in another shard comes
-- first), "0": go on into the next lane
--
-- Lanes (contract §1; priority lanes with guaranteed shares for the lower ones): each claimed torrent is the best-scored
-- of the first non-empty lane (high, normal, low, discovered), except that
-- every lane below it earns ARGV[9] of a claim per claimed torrent while it
-- has ready torrents, and one that has earned a whole claim takes the next
-- one (the most owed first). Credits live in KEYS[19], so the shares hold
-- across calls and workers.
--
-- A lane's due torrents count as its ready ones. Housekeeping reads the due
-- queue oldest first, so a backlog of one lane's due torrents (a bulk add,
-- a crawl behind its revisits) would hide another lane's behind it. So a
-- lane's member set doubles as its due index: a cooling torrent's score
-- there is its due time (add.lua, complete.lua and defer.lua write it,
-- housekeeping sets it back to 0 as the torrent leaves cooling). When the
-- due queue holds more than this call's budget, each of the high, low and
-- discovered lanes also brings its own oldest n + 1 due torrents to ready:
-- more than one claim takes, so no lane runs out within a claim while it has
-- due torrents left. An entry that disagrees with the due queue is put
-- right (it is only an index: the due queue says what is cooling). The
-- normal lane has no member set; its due torrents are found in the due
-- queue's order.
--
-- Returns a flat list: info-hash, score (string), token, lane, ... for each
-- claim (its lane's name: the scripts that settle the visit write the due
-- time to that lane's index),
-- then what the shard offers next (how a sharded claimer picks its next
-- shard, crawler/queue/shard_tops.py): the best ready score after the claim of
-- its first non-empty lane, as (4 - lane number) + score / (1 + score), so
-- a higher lane always offers more; or
-- "due" if ready is empty but due cooling torrents (of unknown held score)
-- wait beyond this call's budget; or "e<time>": empty until that unix time
-- (the first cooling torrent's due time or lease deadline), "e" if nothing
-- is cooling or in flight.

--! include slices  (STEP, each, read)

local now, deadline = tonumber(ARGV[1]), tonumber(ARGV[2])
local n, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local cutoff, K = tonumber(ARGV[5]), tonumber(ARGV[6])
local minute, asked, share = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
-- (x ~= x: NaN, which tonumber accepts and ZADD refuses.)
if not (now and deadline and n and budget and cutoff and K and minute and asked) or now ~= now
    or deadline ~= deadline or n < 0 or budget < 0 or K < 1 or n ~= math.floor(n)
    or budget ~= math.floor(budget) or minute ~= math.floor(minute) or asked < 0
    or asked ~= math.floor(asked) or not share or share < 0 or share > 1 then
  return redis.error_reply('claim.lua: bad arguments')
end
-- lane l: ready[l], members[l] (nil: the normal lane, l = 2)
local LANES = {'high', 'normal', 'low', 'discovered'}
local ready_of = {KEYS[13], KEYS[1], KEYS[14], KEYS[15]}
local members_of = {KEYS[16], nil, KEYS[17], KEYS[18]}

-- Reads: what is due, its held scores and expiry streaks, old tombstones,
-- the top of ready.
local function due(from)
  local flat = redis.call('ZRANGEBYSCORE', from, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, budget)
  local members, when = {}, {}
  for j = 1, #flat, 2 do
    members[#members + 1] = flat[j]
    when[#when + 1] = flat[j + 1]
  end
  return members, when
end

local function number(value, what)
  local x = tonumber(value)
  if not x or x ~= x then error('claim.lua: ' .. what .. ' is not a number: ' .. tostring(value)) end
  return x
end

local expired, expired_at = due(KEYS[4])
local cooled, cooled_at = due(KEYS[3])
-- index: per marked lane, {score, member, ...} to write back into its member set
local index = {{}, nil, {}, {}}
if budget > 0 and #cooled >= budget then
  -- the due queue goes on past this call's budget: every marked lane's own oldest due too
  local seen = {}
  for j = 1, #cooled do seen[cooled[j]] = true end
  local found, found_in = {}, {}
  for _, l in ipairs({1, 3, 4}) do
    local flat = redis.call('ZRANGEBYSCORE', members_of[l], '(0', ARGV[1], 'LIMIT', 0, math.min(budget, n + 1))
    for j = 1, #flat do
      if not seen[flat[j]] then
        seen[flat[j]] = true
        found[#found + 1] = flat[j]
        found_in[#found_in + 1] = l
      end
    end
  end
  local at = read('ZMSCORE', KEYS[3], found)
  for j = 1, #found do
    if at[j] and number(at[j], 'due time of ' .. found[j]) <= now then
      cooled[#cooled + 1] = found[j]
      cooled_at[#cooled_at + 1] = at[j]
    else  -- not cooling, or not due yet: its entry is put right below
      local r = index[found_in[j]]
      r[#r + 1] = at[j] or '0'
      r[#r + 1] = found[j]
    end
  end
end
local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[5], 'LIMIT', 0, budget)
local expired_held = read('HMGET', KEYS[7], expired)
local streaks = read('HMGET', KEYS[9], expired)
local cooled_held = read('HMGET', KEYS[7], cooled)
-- the lane of each torrent housekeeping brings to ready; it leaves its lane's due index
local back = {}
for j = 1, #expired do back[#back + 1] = expired[j] end
for j = 1, #cooled do back[#back + 1] = cooled[j] end
local lane_of = {}
for _, l in ipairs({1, 3, 4}) do
  local in_lane = read('ZMSCORE', members_of[l], back)
  for j = 1, #back do
    if in_lane[j] then
      lane_of[back[j]] = l
      if tonumber(in_lane[j]) ~= 0 then
        local r = index[l]
        r[#r + 1] = '0'
        r[#r + 1] = back[j]
      end
    end
  end
end
local tops = {}
for l = 1, 4 do
  tops[l] = n > 0 and redis.call('ZREVRANGE', ready_of[l], 0, n - 1, 'WITHSCORES') or {}
end
local credit_text = redis.call('HMGET', KEYS[19], 'normal', 'low', 'discovered')
local credit = {0, 0, 0, 0}
for l = 2, 4 do credit[l] = number(credit_text[l - 1] or '0', 'credit of lane ' .. LANES[l]) end

-- Decide, in memory. `candidates`: {member, score text, score, promoted?, lane}.
local candidates = {}
local quarantined, reasons, streak_set, since_at = {}, {}, {}, {}
for j = 1, #expired do
  local h, s = expired[j], expired_held[j] or '1'
  local x = number(s, 'held score of ' .. h)
  local streak = number(streaks[j] or '0', 'expiry streak of ' .. h) + 1
  streak_set[#streak_set + 1] = h
  streak_set[#streak_set + 1] = tostring(streak)
  if streak >= K then
    quarantined[#quarantined + 1] = ARGV[1]
    quarantined[#quarantined + 1] = h
    reasons[#reasons + 1] = h
    reasons[#reasons + 1] = cjson.encode({
      reason = string.format('lease expired %d time%s in a row without a completion', streak,
        streak == 1 and '' or 's'),
      at = now, expiries = streak, score = s})
  else
    candidates[#candidates + 1] = {h, s, x, true, lane_of[h] or 2}
    since_at[h] = expired_at[j]
  end
end
for j = 1, #cooled do
  local h, s = cooled[j], cooled_held[j] or '1'
  candidates[#candidates + 1] = {h, s, number(s, 'held score of ' .. h), true, lane_of[h] or 2}
  since_at[h] = cooled_at[j]
end
local promoted = #candidates
local promoted_members = {}  -- leave held: quarantined torrents keep theirs
for j = 1, promoted do promoted_members[j] = candidates[j][1] end
for l = 1, 4 do
  local top = tops[l]
  for j = 1, #top, 2 do
    candidates[#candidates + 1] = {top[j], top[j + 1], number(top[j + 1], 'score of ' .. top[j]), false, l}
  end
end
-- Each lane's candidates in ZPOPMAX's order: highest score first, equal scores
-- by member, highest first.
local queues = {{}, {}, {}, {}}
for j = 1, #candidates do
  local c = candidates[j]
  local q = queues[c[5]]
  q[#q + 1] = c
end
local function order(x, y)
  if x[3] ~= y[3] then return x[3] > y[3] end
  return x[1] > y[1]
end
for l = 1, 4 do
  if #queues[l] > 1 and promoted > 0 then table.sort(queues[l], order) end
end
-- Pick n: the first non-empty lane's best, unless a lane below it is owed a claim.
local next_of = {1, 1, 1, 1}
local function left(l) return next_of[l] <= #queues[l] end
local chosen = {}
local began
while #chosen < n do
  local first
  for l = 1, 4 do
    if left(l) then first = l; break end
  end
  if not first or (ARGV[10] == '1' and began and first ~= began) then break end
  began = began or first
  local pick, owed = first, 0
  for l = first + 1, 4 do
    if left(l) then
      credit[l] = credit[l] + share
      -- (1e-9: ten shares of 0.1 add up to a hair under 1)
      if credit[l] >= 1 - 1e-9 and credit[l] > owed then pick, owed = l, credit[l] end
    end
  end
  if pick ~= first then credit[pick] = credit[pick] - 1 end
  chosen[#chosen + 1] = queues[pick][next_of[pick]]
  next_of[pick] = next_of[pick] + 1
end
local take = #chosen
local claimed = {}
for j = 1, take do claimed[j] = chosen[j][1] end
local counts = read('HMGET', KEYS[8], claimed)
for j = 1, take do counts[j] = number(counts[j] or '0', 'claim count of ' .. claimed[j]) + 1 end

-- Build every write: promoted torrents not taken go to their lane's ready
-- set; taken ones leave theirs.
local ready, since, unheld, unready = {{}, {}, {}, {}}, {}, {}, {{}, {}, {}, {}}
local is_taken = {}
for j = 1, take do is_taken[chosen[j][1]] = true end
for j = 1, #candidates do
  local c = candidates[j]
  if c[4] and not is_taken[c[1]] then
    local r = ready[c[5]]
    r[#r + 1] = c[2]
    r[#r + 1] = c[1]
    since[#since + 1] = since_at[c[1]]
    since[#since + 1] = c[1]
  end
end
for j = 1, promoted do unheld[#unheld + 1] = promoted_members[j] end
local leases, held, tokens, out = {}, {}, {}, {}
for j = 1, take do
  local c = chosen[j]
  if not c[4] then
    local u = unready[c[5]]
    u[#u + 1] = c[1]
  end
  leases[#leases + 1] = ARGV[2]
  leases[#leases + 1] = c[1]
  held[#held + 1] = c[1]
  held[#held + 1] = c[2]
  tokens[#tokens + 1] = c[1]
  tokens[#tokens + 1] = tostring(counts[j])
  out[#out + 1] = c[1]
  out[#out + 1] = c[2]
  out[#out + 1] = tostring(counts[j])
  out[#out + 1] = LANES[c[5]]
end

-- Writes. A quarantined torrent keeps its held score; a claimed one gets
-- its score held again below.
each('ZREM', KEYS[4], expired)
each('ZREM', KEYS[3], cooled)
each('HDEL', KEYS[7], unheld)
each('HSET', KEYS[9], streak_set)
each('ZADD', KEYS[10], quarantined)
each('HSET', KEYS[11], reasons)
for l = 1, 4 do
  each('ZREM', ready_of[l], unready[l])
  each('ZREM', KEYS[2], unready[l])
  each('ZADD', ready_of[l], ready[l])
end
each('ZADD', KEYS[2], since)
each('ZREM', KEYS[5], old)
each('HDEL', KEYS[6], old)
each('HDEL', KEYS[8], old)
each('HDEL', KEYS[9], old)
for _, l in ipairs({1, 3, 4}) do
  each('ZADD', members_of[l], index[l])
  each('ZREM', members_of[l], old)  -- forgotten: no lane either
end
each('ZADD', KEYS[4], leases)
each('HSET', KEYS[7], held)
each('HSET', KEYS[8], tokens)
if n > 0 then
  redis.call('HSET', KEYS[19], 'normal', string.format('%.17g', credit[2]),
    'low', string.format('%.17g', credit[3]), 'discovered', string.format('%.17g', credit[4]))
end
if asked > 0 then redis.call('HINCRBY', KEYS[12], 'a:' .. ARGV[7], asked) end
if take > 0 then redis.call('HINCRBY', KEYS[12], 's:' .. ARGV[7], take) end
if #expired > 0 then redis.call('HINCRBY', KEYS[12], 'r:' .. ARGV[7], #expired) end

local best = {}
for l = 1, 4 do
  local b = redis.call('ZREVRANGE', ready_of[l], 0, 0, 'WITHSCORES')
  if #b > 0 then
    local x = tonumber(b[2])
    best = {string.format('%.17g', (4 - l) + x / (1 + x))}
    break
  end
end
if #best > 0 then
  out[#out + 1] = best[1]
else
  local c = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  local l = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  local first, text = math.huge, ''
  if c[2] then first, text = tonumber(c[2]), c[2] end
  if l[2] and tonumber(l[2]) < first then first, text = tonumber(l[2]), l[2] end
  out[#out + 1] = first <= now and 'due' or ('e' .. text)
end
return out
