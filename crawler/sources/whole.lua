-- whole.lua: whole-number arguments, checked. Included by the sources' scripts that take counts, times and
-- intervals as arguments (``--! include whole``): ``whole(v, lo, what)`` is
-- ``v`` as a number when it is a whole number from ``lo`` that a Lua number
-- holds exactly (2^53 - 1 at most), else an error naming ``SCRIPT`` (the
-- including script sets it first) and ``what``.

local function whole(v, lo, what)
  local x = tonumber(v)
  if not x or x ~= x or x < lo or x > 9007199254740991 or x ~= math.floor(x) then
    error(SCRIPT .. ': ' .. what .. ' is not a whole number from ' .. lo .. ': ' .. tostring(v))
  end
  return x
end
