-- Which of the candidate trackers some of these torrents name (read only).
--
-- KEYS[1..]  the tracker SETs of torrents of one shard (keys.trackers; one
--            hash tag, so one slot)
-- ARGV[1]    the candidates' digests end to end: 16 hex characters each,
--            the first 8 bytes of the SHA-1 of a URL's bytes
-- Returns the digests found in at least one of the sets, each once.
--
-- The caller sends this with every page of the catalogue, so it sends a
-- digest (16 bytes) in place of a URL (up to 4 KiB): what crosses the
-- network per page does not grow with the candidates' length. Each set's
-- members are read in a table of the digests wanted; a URL met in several
-- sets of the call is hashed once. Two URLs of one digest (a chance of
-- 2^-64 a pair) only keep an unnamed candidate a period longer.
local d = ARGV[1]
if #ARGV ~= 1 or #d % 16 ~= 0 then
  return redis.error_reply('tracker_named: expected one argument of 16-character digests end to end')
end
local want, left = {}, 0
for i = 1, #d, 16 do
  local x = string.sub(d, i, i + 15)
  if not want[x] then want[x] = true; left = left + 1 end
end
local found, seen = {}, {}
for _, key in ipairs(KEYS) do
  if left == 0 then break end
  for _, url in ipairs(redis.call('SMEMBERS', key)) do
    if not seen[url] then
      seen[url] = true
      local x = string.sub(redis.sha1hex(url), 1, 16)
      if want[x] then
        found[#found + 1] = x; want[x] = false; left = left - 1
      end
    end
  end
end
return found
