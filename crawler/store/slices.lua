-- slices.lua: long lists sent in slices. Included by scripts that send long lists to one command
-- (``--! include slices`` in their text; crawler.store.scripts.source inlines it).
-- unpack() of more than ~8,000 values overflows Lua's stack, and one
-- command with a million arguments would stall Redis: every multi-value
-- command goes out in slices of STEP values.

local STEP = 1000  -- values per unpack; even, so pairs are never split

-- ``cmd key v1 v2 ...`` over ``list``, STEP values per call.
local function each(cmd, key, list)
  for i = 1, #list, STEP do
    redis.call(cmd, key, unpack(list, i, math.min(i + STEP - 1, #list)))
  end
end

-- The replies of ``cmd key ...`` over ``list`` in slices, concatenated.
local function read(cmd, key, list)
  local out = {}
  for i = 1, #list, STEP do
    local part = redis.call(cmd, key, unpack(list, i, math.min(i + STEP - 1, #list)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end
