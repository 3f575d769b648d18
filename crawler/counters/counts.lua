-- counts.lua: counts as text. Included by the scripts that write whole-number counts
-- (``--! include counts`` in record.lua and places.lua; crawler.store.scripts.source inlines it).
-- Redis 7.0 turns a Lua number argument into text with "%.17g", over a third of an HSET's whole
-- call from Lua; a count made into text with "%d" once per value and call goes as that text. A number that is not whole (no count is) goes as the number.

local count_texts = {}

-- ``n`` as a command argument: its text when it is whole
local function count_text(n)
  local t = count_texts[n]
  if not t then
    if n ~= math.floor(n) then return n end
    t = string.format('%d', n)
    count_texts[n] = t
  end
  return t
end
