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
if not cutoff then
  return redis.error_reply('sweep.lua: cutoff must be a number')
end
-- every bucket read (MGET in slices: unpack() holds ~8000 values) and every
-- new value computed before the first write
local vals = {}
for first = 1, #KEYS, 1000 do
  local last = math.min(first + 999, #KEYS)
  local got = redis.call('MGET', unpack(KEYS, first, last))
  for j = first, last do
    vals[j] = got[j - first + 1]
  end
end
local removed, writes = 0, {}
for i = 1, #KEYS do
  local s = vals[i]
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
      writes[#writes + 1] = {KEYS[i], concat(keep)}
    end
  end
end
for _, w in ipairs(writes) do
  if w[2] == '' then
    redis.call('DEL', w[1])
  else
    redis.call('SET', w[1], w[2])
  end
end
return removed
