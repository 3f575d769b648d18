-- metadata_note.lua: what a metadata fetch of one torrent learned (crawler/queue/torrent_metadata.py).
--
-- KEYS[1] torrent HASH of the torrent
--
-- ARGV[1] 'found', 'failed' or 'cut', ARGV[2] now (unix seconds)
-- found:  ARGV[3] the name (cleaned, at most 800 bytes; '' none), ARGV[4] the
--         total size in bytes ('' unknown), ARGV[5] the file count
-- failed: ARGV[3] the first wait (s), ARGV[4] the longest (s)
-- cut:    nothing more
--
-- A torrent whose hash is gone (never tracked, or forgotten) gets nothing:
-- no hash is made for it. found: the name is set only if the torrent has
-- none (a name add kept is never replaced), `size` and `files` are set,
-- `md_done` records the success (one per torrent, ever) and the failure
-- count, next try and cuts go. failed: `md_fails` counts one more and
-- `md_next` is now + first wait x 2^(fails - 1), at most the longest; the
-- cuts go. cut (the fetch ended because its process stopped, which says
-- nothing of the torrent): neither a success nor a failure; `md_cuts`
-- counts the cuts in a row, unless the torrent has a success already.
-- Returns 1 when written (cut: the cuts in a row), 0 when the torrent is
-- gone (cut: or has its success). Every argument is checked before the
-- first write.

local SCRIPT = 'metadata_note.lua'
local op, now = ARGV[1], tonumber(ARGV[2])
local function whole(v) local x = tonumber(v); return x ~= nil and x == x and x >= 0 and x % 1 == 0 end
if not now or now ~= now then return redis.error_reply(SCRIPT .. ': bad arguments') end
if op == 'found' then
  if #ARGV ~= 5 or #ARGV[3] > 800 or (ARGV[4] ~= '' and not whole(ARGV[4])) or not whole(ARGV[5]) then
    return redis.error_reply(SCRIPT .. ': bad arguments')
  end
elseif op == 'failed' then
  local first, most = tonumber(ARGV[3]), tonumber(ARGV[4])
  if #ARGV ~= 4 or not first or not most or first ~= first or most ~= most or first <= 0 or most < first then
    return redis.error_reply(SCRIPT .. ': bad arguments')
  end
elseif op == 'cut' then
  if #ARGV ~= 2 then return redis.error_reply(SCRIPT .. ': bad arguments') end
else
  return redis.error_reply(SCRIPT .. ': bad arguments')
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if op == 'found' then
  if ARGV[3] ~= '' then redis.call('HSETNX', KEYS[1], 'name', ARGV[3]) end
  local fields = {'files', ARGV[5], 'md_done', ARGV[2]}
  if ARGV[4] ~= '' then fields[#fields + 1] = 'size'; fields[#fields + 1] = ARGV[4] end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('HDEL', KEYS[1], 'md_fails', 'md_next', 'md_cuts')
  return 1
end
if op == 'cut' then
  if redis.call('HEXISTS', KEYS[1], 'md_done') == 1 then return 0 end
  return redis.call('HINCRBY', KEYS[1], 'md_cuts', 1)
end
redis.call('HDEL', KEYS[1], 'md_cuts')
local fails = redis.call('HINCRBY', KEYS[1], 'md_fails', 1)
local wait = math.min(tonumber(ARGV[3]) * 2 ^ math.min(fails - 1, 60), tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'md_next', string.format('%.17g', now + wait))
return 1
