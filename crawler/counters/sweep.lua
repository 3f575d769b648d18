-- sweep.lua: drop expired dedupe marks from some mark buckets.
--
-- KEYS[1..n]  marks   STRING of 12-byte records (8-byte field, big-endian u32 unix
--                     second of the mark) ({ns}:mk:<n>)
-- ARGV[1]     cutoff  a mark at or before this unix second has expired
--
-- Correctness never depends on this sweep (record.lua compares times); it
-- only gives stale records' memory back. Callers pass a bounded number of
-- buckets of ~100 records each, so one call holds Redis for well under a few
-- milliseconds. A bucket left empty is deleted. Returns records removed.

local byte, sub, concat = string.byte, string.sub, table.concat
local cutoff = tonumber(ARGV[1])
local removed = 0
for i = 1, #KEYS do
  local s = redis.call('GET', KEYS[i])
  if s then
    local keep, dropped = {}, 0
    for x = 1, #s - 11, 12 do
      local a, b, c, d = byte(s, x + 8, x + 11)
      if ((a * 256 + b) * 256 + c) * 256 + d > cutoff then
        keep[#keep + 1] = sub(s, x, x + 11)
      else
        dropped = dropped + 1
      end
    end
    if dropped > 0 then
      removed = removed + dropped
      if #keep == 0 then
        redis.call('DEL', KEYS[i])
      else
        redis.call('SET', KEYS[i], concat(keep))
      end
    end
  end
end
return removed
