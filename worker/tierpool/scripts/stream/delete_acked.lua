-- include: helpers/stream.lua
-- KEYS: stream. ARGV: group, cursor (the id of a pending entry, or '-': from the start), most pending entries to
-- walk, most entries to delete.
-- The lease holder's safety net for retention (TRIM deletes what lies below the oldest pending entry; this, what
-- lies above it, so no hung task holds retention up). The outcome scripts delete their entries as they ack them;
-- left over are the entries acked by workers that predate that, and each entry that was the group's last
-- delivered one when it was acked (see delete_acked). Walks the pending entries from the cursor (XPENDING: ids,
-- no payloads) and deletes the entries between two of them, and between the last of them and the group's last
-- delivered entry, which stays (so that the lag stays exact). Every entry up to that one was delivered, so those
-- are acked: never a pending or an undelivered entry. Returns {count deleted, next cursor ('-': walked to the end)}.
local stream, group = KEYS[1], ARGV[1]
local cursor, walk, budget = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local last = last_delivered(stream, group)
if last == '0-0' then return {0, '-'} end
local lo, start = nil, '-'
if cursor ~= '-' then lo, start = cursor, '(' .. cursor end
local pending = redis.call('XPENDING', stream, group, start, '+', walk)
local bounds = {}
for _, p in ipairs(pending) do bounds[#bounds + 1] = p[1] end
local walked = #pending < walk
if walked then bounds[#bounds + 1] = last end
local deleted = 0
for _, hi in ipairs(bounds) do
  if lo and lo ~= hi then
    local gap = redis.call('XRANGE', stream, '(' .. lo, '(' .. hi, 'COUNT', budget - deleted)
    if #gap > 0 then
      local ids = {}
      for _, e in ipairs(gap) do ids[#ids + 1] = e[1] end
      deleted = deleted + redis.call('XDEL', stream, unpack(ids))
      if deleted >= budget then return {deleted, lo} end
    end
  end
  lo = hi
end
if walked then return {deleted, '-'} end
return {deleted, lo}
