-- rate_budget.lua: when each request of a batch of visits may be sent. Under a
-- namespace-wide rate and each member's own (the announce cap: each capped tracker's), atomically.
--
-- A cap of r requests per second is a schedule with one request every 1/r
-- seconds (the generic cell rate algorithm with no burst): each cap keeps the
-- next free time, a request goes at the latest of now and its caps' next free
-- times, and each of its caps' next free time moves one interval on (see
-- slots below for how the namespace's and a tracker's schedule meet). So
-- requests are spaced evenly, never bunched at the start of a second, and the
-- caps hold across every worker whatever their clocks: the only clock is
-- Redis's (TIME), and times are whole microseconds (exact in a Lua number).
--
-- Every visit asking is given its places at once, in the order asked: a
-- queue with no polling, each visit sleeping once until its turn. A worker
-- that dies strands the places its waiting visits held (at most one visit
-- per greenlet), which pass unused; its torrents come back with their leases.
--
-- KEYS[1]  HASH  "*" or a tracker URL -> next free time (µs)   (keys.announce_cap)
-- KEYS[2]  HASH  this minute's figures (keys.announce_cap_minute), expiring
-- ARGV[1]  the namespace's interval, µs (whole; 0: no namespace cap)
-- ARGV[2]  T, the capped trackers named below; ARGV[3 .. 2 + 2T]: URL, interval (µs, whole, >= 1)
-- then     V, the visits; each: m, then m tracker numbers (1..T; 0: a tracker
--          without a cap of its own), one per request, in the order to send
-- Returns one entry per visit: the µs to wait before each of its requests.

--! include slices  (STEP, each, read)

local SCRIPT = 'rate_budget.lua'
--! include whole  (whole)

local every = whole(ARGV[1], 0, 'interval')
local T = whole(ARGV[2], 0, 'tracker count')
local urls, gaps = {}, {}
for i = 1, T do
  urls[i] = ARGV[1 + 2 * i]
  gaps[i] = whole(ARGV[2 + 2 * i], 1, 'interval of ' .. tostring(urls[i]))
end
local a = 3 + 2 * T
local V = whole(ARGV[a], 0, 'visit count')
local visits = {}
a = a + 1
for v = 1, V do
  local m = whole(ARGV[a], 1, 'request count')
  local refs = {}
  for j = 1, m do
    local t = whole(ARGV[a + j], 0, 'tracker number')
    if t > T then error('rate_budget.lua: tracker number ' .. t .. ' of ' .. T) end
    refs[j] = t
  end
  visits[v] = refs
  a = a + m + 1
end
if a ~= #ARGV + 1 then
  return redis.error_reply('rate_budget.lua: ' .. (#ARGV + 1 - a) .. ' arguments left over')
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local fields = {'*'}
for i = 1, T do fields[i + 1] = urls[i] end
local stored = read('HMGET', KEYS[1], fields)
local function at(s)
  local x = tonumber(s)
  if not x or x < now then return now end
  return x
end
local free_all = at(stored[1])
local free = {}
for i = 1, T do free[i] = at(stored[i + 1]) end

-- The waits of a visit's requests. A request takes the namespace's next
-- free place and goes then, or later if its tracker's own schedule is
-- further ahead; the namespace's schedule moves on from the place, not from
-- the send, so a slow tracker's requests never push back every other
-- tracker's (a request so held goes after its place: the namespace's cap
-- then holds over any window longer than that hold). Each request is counted
-- as sent, and as held back by a cap whose schedule was more than two
-- intervals ahead of now.
local tally = {sent = 0, wait = 0, held = 0}
local function slots(refs)
  local waits = {}
  for j = 1, #refs do
    local r = refs[j]
    local place = now
    if every > 0 and free_all > place then place = free_all end
    local t = place
    if r > 0 and free[r] > t then t = free[r] end
    tally.sent = tally.sent + 1
    tally.wait = tally.wait + (t - now)
    if every > 0 and place > now + 2 * every then tally.held = tally.held + 1 end
    if r > 0 then
      tally[r] = tally[r] or {0, 0}
      tally[r][1] = tally[r][1] + 1
      if free[r] > now + 2 * gaps[r] then tally[r][2] = tally[r][2] + 1 end
      free[r] = t + gaps[r]
    end
    if every > 0 then free_all = place + every end
    waits[j] = t - now
  end
  return waits
end

local out = {}
for v = 1, V do out[v] = slots(visits[v]) end

local kv = {}
if every > 0 then kv[1], kv[2] = '*', string.format('%.0f', free_all) end
for i = 1, T do
  kv[#kv + 1] = urls[i]
  kv[#kv + 1] = string.format('%.0f', free[i])
end
each('HSET', KEYS[1], kv)
local m = KEYS[2]
if tally.sent > 0 then
  redis.call('HINCRBY', m, 'sent', tally.sent)
  redis.call('HINCRBY', m, 'wait_us', string.format('%.0f', tally.wait))
  if tally.held > 0 then redis.call('HINCRBY', m, 'held', tally.held) end
end
for r = 1, T do
  local t = tally[r]
  if t then
    redis.call('HINCRBY', m, 'sent:' .. urls[r], t[1])
    if t[2] > 0 then redis.call('HINCRBY', m, 'held:' .. urls[r], t[2]) end
  end
end
if tally.sent > 0 then redis.call('EXPIRE', m, 600) end
return out
