-- Record answers/failures of one tracker and compute its backoff, atomically.
--
-- KEYS[1]  HASH tracker URL -> JSON {answers, failures, streak, until}  (keys.tracker_health)
-- ARGV[1]  tracker URL
-- ARGV[2]  answers to add (batched successes)
-- ARGV[3]  failures to add
-- ARGV[4]  last outcome: "ok" (resets the streak), "fail" (extends it) or "none"
-- ARGV[5]  now, unix seconds
-- ARGV[6]  backoff base seconds
-- ARGV[7]  backoff max seconds
-- ARGV[8]  consecutive failures before backing off
-- Returns the new JSON.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local h
if raw then h = cjson.decode(raw) else h = {answers = 0, failures = 0, streak = 0, ['until'] = 0} end
local fails = tonumber(ARGV[3])
h.answers = h.answers + tonumber(ARGV[2])
h.failures = h.failures + fails
if ARGV[4] == 'ok' then
  h.streak = 0
  h['until'] = 0
elseif ARGV[4] == 'fail' then
  h.streak = h.streak + fails
  local over = h.streak - tonumber(ARGV[8])
  if over >= 0 then
    local wait = tonumber(ARGV[6]) * math.pow(2, math.min(over, 40))
    wait = math.min(wait, tonumber(ARGV[7]))
    h['until'] = tonumber(ARGV[5]) + wait
  end
end
local out = cjson.encode(h)
redis.call('HSET', KEYS[1], ARGV[1], out)
return out
