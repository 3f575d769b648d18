-- claim.lua: lease the highest-scored ready torrents (SPEC §1), after
-- bounded housekeeping that every claimer shares:
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
-- KEYS[12] rates       HASH per-minute counts (crawler/queue_rates.py)
--
-- ARGV[1] now, ARGV[2] lease deadline, ARGV[3] how many to claim,
-- ARGV[4] housekeeping budget, ARGV[5] tombstone cutoff (evicted before it
-- are forgotten), ARGV[6] K: expiries in a row that quarantine a torrent,
-- ARGV[7] the unix minute of now, ARGV[8] torrents this claim asked for
-- (counted once per claim: 0 for the next shards of a claim spread over
-- several, and for housekeeping)
--
-- Returns a flat list: info-hash, score (string), token, ... for each claim,
-- then what the shard offers next (how a sharded claimer picks its next
-- shard, crawler/shard_tops.py): the best ready score after the claim; or
-- "due" if ready is empty but due cooling torrents (of unknown held score)
-- wait beyond this call's budget; or "e<time>": empty until that unix time
-- (the first cooling torrent's due time or lease deadline), "e" if nothing
-- is cooling or in flight.

--! include slices  (STEP, each, read)

local now, deadline = tonumber(ARGV[1]), tonumber(ARGV[2])
local n, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local cutoff, K = tonumber(ARGV[5]), tonumber(ARGV[6])
local minute, asked = tonumber(ARGV[7]), tonumber(ARGV[8])
-- (x ~= x: NaN, which tonumber accepts and ZADD refuses.)
if not (now and deadline and n and budget and cutoff and K and minute and asked) or now ~= now
    or deadline ~= deadline or n < 0 or budget < 0 or K < 1 or n ~= math.floor(n)
    or budget ~= math.floor(budget) or minute ~= math.floor(minute) or asked < 0
    or asked ~= math.floor(asked) then
  return redis.error_reply('claim.lua: bad arguments')
end

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
local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ARGV[5], 'LIMIT', 0, budget)
local expired_held = read('HMGET', KEYS[7], expired)
local streaks = read('HMGET', KEYS[9], expired)
local cooled_held = read('HMGET', KEYS[7], cooled)
local top = n > 0 and redis.call('ZREVRANGE', KEYS[1], 0, n - 1, 'WITHSCORES') or {}

-- Decide, in memory. `candidates`: {member, score text, score, promoted?}.
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
    candidates[#candidates + 1] = {h, s, x, true}
    since_at[h] = expired_at[j]
  end
end
for j = 1, #cooled do
  local h, s = cooled[j], cooled_held[j] or '1'
  candidates[#candidates + 1] = {h, s, number(s, 'held score of ' .. h), true}
  since_at[h] = cooled_at[j]
end
local promoted = #candidates
local promoted_members = {}  -- leave held: quarantined torrents keep theirs
for j = 1, promoted do promoted_members[j] = candidates[j][1] end
for j = 1, #top, 2 do
  candidates[#candidates + 1] = {top[j], top[j + 1], number(top[j + 1], 'score of ' .. top[j]), false}
end
if n > 0 and promoted > 0 then
  -- ZPOPMAX's order: highest score first, equal scores by member, highest first.
  table.sort(candidates, function(x, y)
    if x[3] ~= y[3] then return x[3] > y[3] end
    return x[1] > y[1]
  end)
end
local take = math.min(n, #candidates)
local claimed = {}
for j = 1, take do claimed[j] = candidates[j][1] end
local counts = read('HMGET', KEYS[8], claimed)
for j = 1, take do counts[j] = number(counts[j] or '0', 'claim count of ' .. claimed[j]) + 1 end

-- Build every write.
local ready, since, unheld, unready = {}, {}, {}, {}
for j = take + 1, #candidates do
  local c = candidates[j]
  if c[4] then
    ready[#ready + 1] = c[2]
    ready[#ready + 1] = c[1]
    since[#since + 1] = since_at[c[1]]
    since[#since + 1] = c[1]
  end
end
for j = 1, promoted do unheld[#unheld + 1] = promoted_members[j] end
local leases, held, tokens, out = {}, {}, {}, {}
for j = 1, take do
  local c = candidates[j]
  if not c[4] then unready[#unready + 1] = c[1] end
  leases[#leases + 1] = ARGV[2]
  leases[#leases + 1] = c[1]
  held[#held + 1] = c[1]
  held[#held + 1] = c[2]
  tokens[#tokens + 1] = c[1]
  tokens[#tokens + 1] = tostring(counts[j])
  out[#out + 1] = c[1]
  out[#out + 1] = c[2]
  out[#out + 1] = tostring(counts[j])
end

-- Writes. A quarantined torrent keeps its held score; a claimed one gets
-- its score held again below.
each('ZREM', KEYS[4], expired)
each('ZREM', KEYS[3], cooled)
each('HDEL', KEYS[7], unheld)
each('HSET', KEYS[9], streak_set)
each('ZADD', KEYS[10], quarantined)
each('HSET', KEYS[11], reasons)
each('ZREM', KEYS[1], unready)
each('ZREM', KEYS[2], unready)
each('ZADD', KEYS[1], ready)
each('ZADD', KEYS[2], since)
each('ZREM', KEYS[5], old)
each('HDEL', KEYS[6], old)
each('HDEL', KEYS[8], old)
each('HDEL', KEYS[9], old)
each('ZADD', KEYS[4], leases)
each('HSET', KEYS[7], held)
each('HSET', KEYS[8], tokens)
if asked > 0 then redis.call('HINCRBY', KEYS[12], 'a:' .. ARGV[7], asked) end
if take > 0 then redis.call('HINCRBY', KEYS[12], 's:' .. ARGV[7], take) end
if #expired > 0 then redis.call('HINCRBY', KEYS[12], 'r:' .. ARGV[7], #expired) end

local best = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #best > 0 then
  out[#out + 1] = best[2]
else
  local c = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  local l = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  local first, text = math.huge, ''
  if c[2] then first, text = tonumber(c[2]), c[2] end
  if l[2] and tonumber(l[2]) < first then first, text = tonumber(l[2]), l[2] end
  out[#out + 1] = first <= now and 'due' or ('e' .. text)
end
return out
