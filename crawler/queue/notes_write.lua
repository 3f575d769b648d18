-- notes_write.lua: write a visit's source notes (note.lua, complete.lua).
-- Included by note.lua and complete.lua (``--! include notes_write``), after slices.lua: the
-- notes' arguments are ARGV[from] to ARGV[last]:
--
-- ARGV[from]           seconds the hash lives after this write (whole, >= 1)
-- ARGV[from + 1]       n, the fields to set; then n field, value pairs
-- ARGV[from + 2 + 2n .. last] the fields to drop

-- True when the notes' arguments ``from`` to ``last`` are malformed.
local function notes_bad(from, last)
  local ttl, n = tonumber(ARGV[from]), tonumber(ARGV[from + 1])
  -- the life as EXPIRE takes it: digits (tonumber also reads "6e1" and " 60")
  return not ttl or ttl < 1 or ttl ~= math.floor(ttl) or not string.match(ARGV[from], '^%d+$')
    or #ARGV[from] > 15 or not n or n < 0 or n ~= math.floor(n) or last < from + 1 + 2 * n
end

-- Set and drop the fields of the notes hash ``key``, and renew its life (a torrent may have
-- 10,000 trackers: in slices).
local function write_notes(key, from, last)
  local n = tonumber(ARGV[from + 1])
  if n > 0 then
    local set = {}
    for i = from + 2, from + 1 + 2 * n do set[#set + 1] = ARGV[i] end
    each('HSET', key, set)
  end
  if last > from + 1 + 2 * n then
    local drop = {}
    for i = from + 2 + 2 * n, last do drop[#drop + 1] = ARGV[i] end
    each('HDEL', key, drop)
  end
  redis.call('EXPIRE', key, ARGV[from])  -- a hash the drops emptied is gone: EXPIRE then does nothing
end
