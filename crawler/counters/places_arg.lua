-- places_arg.lua: reading the places of a visit. Included by the counter scripts that take a visit's places
-- (``--! include places_arg`` in record.lua and places.lua; crawler.store.scripts.source
-- inlines it): reading their binary arguments, where a string is a u16 length
-- then its bytes and integers are big endian.

-- The u16 at byte i of s, or nil past its end.
local function u16(s, i)
  local a, b = string.byte(s, i, i + 1)
  if not b then
    return nil
  end
  return a * 256 + b
end

-- The string at byte i of s and the byte after it, or nil and i past its end.
local function str(s, i)
  local len = u16(s, i)
  if not len or i + 1 + len > #s then
    return nil, i
  end
  return string.sub(s, i + 2, i + 1 + len), i + 2 + len
end

-- The places of ps, each {country number, escaped city, escaped postcode, parts}
-- ('' = unknown; parts: 1 for the country, plus one each for a known city and
-- postcode, the place metrics of an IP there): per place a u16 country number
-- (first to last), str(city), str(postcode). On a malformed place: nil and the
-- byte where it starts.
local function read_places(ps, first, last)
  local places, i = {}, 1
  while i <= #ps do
    local at, c = i, u16(ps, i)
    local y, z
    y, i = str(ps, i + 2)
    if y then z, i = str(ps, i) end
    if not c or c < first or c > last or not z then
      return nil, at
    end
    places[#places + 1] = {c, y, z, 1 + (y ~= '' and 1 or 0) + (z ~= '' and 1 or 0)}
  end
  return places
end
