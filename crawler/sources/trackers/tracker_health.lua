-- Record one tracker's answers, refusals and failures, its learned cap and
-- the peers cut from its replies, and compute its backoff, atomically.
--
-- KEYS[1]  HASH tracker URL -> JSON {answers, failures, refusals, last_refusal, last_failure,
--          blocked, last_blocked, no_scrape_until, streak, until, cut, cap, used}
--                                                              (keys.tracker_health)
-- KEYS[2]  ZSET tracker URL -> unix time last used             (keys.tracker_used)
-- KEYS[3]  ZSET tracker URL -> answers + failures + refusals + blocked    (the traffic ranking)
-- KEYS[4]  HASH answers, failures, refusals, cut -> their sums over the ranked
--          entries (tracker_prune.lua takes a pruned entry's out)
-- ARGV[1]  tracker URL
-- ARGV[2]  answers to add (batched successes)
-- ARGV[3]  failures to add
-- ARGV[4]  last outcome: "ok" (an answer or a refusal: resets the streak),
--          "fail" (extends it) or "none"
-- ARGV[5]  now, unix seconds
-- ARGV[6]  backoff base seconds
-- ARGV[7]  backoff max seconds
-- ARGV[8]  consecutive failures before backing off
-- ARGV[9]  refusals to add
-- ARGV[10] the latest refusal's message, already redacted ("" if none)
-- ARGV[11] peers cut from replies (past the per-source bound) to add
-- ARGV[12] evidence of a cap: the entries of a reply that returned fewer than
--          asked while its counts said the swarm was larger (0: none)
-- ARGV[13] the most entries any of the batched replies returned (0: none)
-- ARGV[14] seconds a cap stands unconfirmed before a smaller capped reply may lower it
-- ARGV[15] unix time until which the tracker is not scraped (it cannot scrape;
--          0: scrape it again), or "" to leave it as it is
-- ARGV[16] the latest failure's message, already redacted ("" or absent: none)
-- ARGV[17] asks the address policy refused to add (its host resolves to a
--          private or local address: not the tracker's doing, no backoff; absent: 0)
-- ARGV[18] the latest such refusal's message ("" or absent: none)
-- Returns the new JSON.
--
-- The ranking and the sums let status and /metrics read the busiest trackers
-- and "all the others" in a few commands, however many trackers the crawl
-- knows. An entry not ranked yet (written before the ranking existed) adds
-- its whole counts to the sums, so they stay the sums of what is ranked.
--
-- The cap rises with any reply that returns more: a tracker never returns
-- more entries than its cap, so the largest reply seen is a lower bound of
-- it, and a cap learned from a reply that was short for another reason is
-- corrected by the next longer one. A reply returning the cap confirms it
-- (cap_at); a tracker that lowered its cap never confirms the old one again,
-- so once the cap stood unconfirmed for ARGV[14] seconds a smaller capped
-- reply replaces it.
local n = {}
for i = 2, 14 do
  if i ~= 4 and i ~= 10 then
    n[i] = tonumber(ARGV[i])
    if n[i] == nil or n[i] ~= n[i] then
      return redis.error_reply('tracker_health: ARGV[' .. i .. '] is not a number: ' .. tostring(ARGV[i]))
    end
  end
end
for _, i in ipairs({2, 3, 9, 11}) do
  if n[i] < 0 or n[i] ~= math.floor(n[i]) then
    return redis.error_reply('tracker_health: ARGV[' .. i .. '] is not a whole count: ' .. tostring(ARGV[i]))
  end
end
local no_scrape = nil
if ARGV[15] ~= nil and ARGV[15] ~= '' then
  no_scrape = tonumber(ARGV[15])
  if no_scrape == nil or no_scrape ~= no_scrape or no_scrape < 0 then
    return redis.error_reply('tracker_health: ARGV[15] is not a unix time: ' .. tostring(ARGV[15]))
  end
end
local blocked = tonumber(ARGV[17] or '0')
if blocked == nil or blocked < 0 or blocked ~= math.floor(blocked) then
  return redis.error_reply('tracker_health: ARGV[17] is not a whole count: ' .. tostring(ARGV[17]))
end
local outcome = ARGV[4]
if outcome ~= 'ok' and outcome ~= 'fail' and outcome ~= 'none' then
  return redis.error_reply('tracker_health: unknown outcome ' .. tostring(outcome))
end
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local h
if raw then h = cjson.decode(raw) else h = {} end
h.answers = (tonumber(h.answers) or 0) + n[2]
h.failures = (tonumber(h.failures) or 0) + n[3]
h.refusals = (tonumber(h.refusals) or 0) + n[9]
h.cut = (tonumber(h.cut) or 0) + n[11]
h.streak = tonumber(h.streak) or 0
h['until'] = tonumber(h['until']) or 0
if ARGV[10] ~= '' then h.last_refusal = ARGV[10] end
if ARGV[16] and ARGV[16] ~= '' then h.last_failure = ARGV[16] end
if blocked > 0 then h.blocked = (tonumber(h.blocked) or 0) + blocked end
if ARGV[18] and ARGV[18] ~= '' then h.last_blocked = ARGV[18] end
h.cap = tonumber(h.cap)
if n[12] > 0 and not h.cap then
  h.cap = n[12]
  h.cap_at = n[5]
end
if h.cap and n[13] >= h.cap then
  h.cap = n[13]
  h.cap_at = n[5]
end
if n[12] > 0 and n[12] < h.cap and n[5] - (tonumber(h.cap_at) or 0) > n[14] then
  h.cap = n[12]
  h.cap_at = n[5]
end
if outcome == 'ok' then
  h.streak = 0
  h['until'] = 0
elseif outcome == 'fail' then
  h.streak = h.streak + n[3]
  local over = h.streak - n[8]
  if over >= 0 then
    local wait = n[6] * math.pow(2, math.min(over, 40))
    wait = math.min(wait, n[7])
    h['until'] = n[5] + wait
  end
end
if no_scrape then h.no_scrape_until = no_scrape end
h.used = n[5]
local out = cjson.encode(h)
local ranked = redis.call('ZSCORE', KEYS[3], ARGV[1])
local sums = {{'answers', n[2], h.answers}, {'failures', n[3], h.failures}, {'refusals', n[9], h.refusals},
  {'cut', n[11], h.cut}}
for _, s in ipairs(sums) do
  local add = s[2]
  if not ranked then add = s[3] end
  if add ~= 0 then redis.call('HINCRBY', KEYS[4], s[1], add) end
end
redis.call('HSET', KEYS[1], ARGV[1], out)
redis.call('ZADD', KEYS[2], n[5], ARGV[1])
redis.call('ZADD', KEYS[3], h.answers + h.failures + h.refusals + (tonumber(h.blocked) or 0), ARGV[1])
return out
