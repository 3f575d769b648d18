-- Which of the candidate trackers some of these torrents name (read only).
--
-- KEYS[1..]  the tracker SETs of torrents of one shard (keys.trackers; one
--            hash tag, so one slot)
-- ARGV[1..]  candidate tracker URLs
-- Returns the candidates held by at least one of the sets.
--
-- Few candidates: SMISMEMBER of them in each set. Many: each set's members
-- looked up in a table of them. Either way only the answer leaves Redis,
-- not the sets.
local want, left = {}, 0
for _, url in ipairs(ARGV) do
  if not want[url] then want[url] = true; left = left + 1 end
end
local found = {}
for _, key in ipairs(KEYS) do
  if left == 0 then break end
  if left <= 16 then
    local urls = {}
    for url, w in pairs(want) do if w then urls[#urls + 1] = url end end
    table.sort(urls)
    local is = redis.call('SMISMEMBER', key, unpack(urls))
    for i, yes in ipairs(is) do
      if yes == 1 then
        found[#found + 1] = urls[i]; want[urls[i]] = false; left = left - 1
      end
    end
  else
    for _, url in ipairs(redis.call('SMEMBERS', key)) do
      if want[url] then
        found[#found + 1] = url; want[url] = false; left = left - 1
      end
    end
  end
end
return found
