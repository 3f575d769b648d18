-- note.lua: what one visit learned about a torrent's sources, in one step
-- (crawler/queue/source_notes.py): fields set, fields dropped, and the
-- hash's life renewed. Every argument is checked before the first write. A
-- visit that completes writes its notes in its completion instead
-- (complete.lua, the same include); this is for the others.
--
-- KEYS[1] notes HASH (keys.tracker_min_interval)
--
-- ARGV[1] seconds the hash lives after this write (whole, >= 1)
-- ARGV[2] n, the fields to set; ARGV[3 .. 2 + 2n]: field, value
-- ARGV[3 + 2n ..] the fields to drop
--
-- Returns the hash's field count.

--! include slices  (STEP, each, read)
--! include notes_write  (notes_bad, write_notes)

if notes_bad(1, #ARGV) then
  return redis.error_reply('note.lua: bad arguments')
end
write_notes(KEYS[1], 1, #ARGV)
return redis.call('HLEN', KEYS[1])
