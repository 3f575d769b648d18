-- take.lua: take the StatHat outbox for posting (or recover an abandoned batch).
--
-- KEYS[1]  outbox    HASH stat name -> pending count ({ns}:sh:outbox)
-- KEYS[2]  inflight  HASH stat name -> count being posted ({ns}:sh:inflight)
-- KEYS[3]  owner     STRING "<token> <lease end, Redis ms>" of the flusher
--                    posting it ({ns}:sh:owner)
-- ARGV[1]  token     this flusher's token (no spaces)
-- ARGV[2]  lease     milliseconds the claim is held
--
-- Returns {0} when another flusher holds a live claim, {2} when there is
-- nothing to post, else {1, recovered, fields}: the in-flight hash is the
-- batch to post, of that many fields, which the flusher reads in HSCAN pages,
-- a page at a time as its posts need them
-- (crawler/store/hash_pages.py: an HGETALL here held Redis ~0.7 s for a million
-- stats). recovered = 1 when it was already in flight: left by a flusher that
-- died, ran out of time or failed to post (settle.lua's release), or whose
-- lease lapsed. New increments keep landing in the outbox while a batch is in
-- flight; the outbox is taken once the batch in flight is all posted.
--
-- The lease end lives in the value, on Redis's clock (TIME), and the key has
-- no TTL: a lapsed claim still names its holder until another flusher takes
-- it over, so settle.lua can tell "lapsed, nobody took it" (the holder's acks
-- still count) from "taken over" (they must not).

local token, lease = ARGV[1], tonumber(ARGV[2])
if not token or token == '' or string.find(token, ' ', 1, true) or not lease or lease <= 0 then
  return redis.error_reply('take.lua: expected a token without spaces and a lease in ms')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = token .. ' ' .. string.format('%d', now + lease)

if redis.call('EXISTS', KEYS[2]) == 1 then
  local owner = redis.call('GET', KEYS[3])
  if owner then
    local who, ends = string.match(owner, '^(%S+) (%d+)$')
    if who and who ~= token and tonumber(ends) > now then
      return {0}
    end
    -- a bare token whose lease is the key's TTL, as flushers that keep no lease
    -- end in the value write it: honoured while it lasts, so a rolling upgrade
    -- never posts one batch from two flushers
    if not who and redis.call('PTTL', KEYS[3]) > 0 then
      return {0}
    end
  end
  redis.call('SET', KEYS[3], mine)
  return {1, 1, redis.call('HLEN', KEYS[2])}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {2}
end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], mine)
return {1, 0, redis.call('HLEN', KEYS[2])}
