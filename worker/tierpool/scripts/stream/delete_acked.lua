-- include: helpers/stream.lua
-- KEYS: stream. ARGV: group, cursor (the id of a pending entry, or '-': from the start), most pending entries to
-- walk, most entries to delete, most bytes of entries to read (absent: no byte limit).
-- The lease holder's safety net for retention (TRIM deletes what lies below the oldest pending entry; this, what
-- lies above it, so no hung task holds retention up). The outcome scripts delete their entries as they ack them;
-- left over are the entries acked by workers that predate that, and each entry that was the group's last
-- delivered one when it was acked (see delete_acked). Walks the pending entries from the cursor (XPENDING: ids,
-- no payloads) and deletes the entries between two of them, and between the last of them and the group's last
-- delivered entry, which stays (so that the lag stays exact). Every entry up to that one was delivered, so those
-- are acked: never a pending or an undelivered entry. No command lists a stream's ids without their fields, so
-- the entries between are read one at a time (XRANGE COUNT 1) and the call stops once it has read the byte budget
-- (its ids and field names and values): one call holds at most that plus one entry, whatever the payloads
-- (1,000 entries of 256 KB read at once were 256 MB). Returns {count deleted, next cursor ('-': walked to the
-- end)}; a call stopped by a budget returns the pending entry before the gap it was in, so the next one goes on.
local stream, group = KEYS[1], ARGV[1]
local cursor, walk, budget = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local bytes_left = tonumber(ARGV[5] or '') or math.huge
local function size_of(entry)
  local n = #entry[1]
  for _, part in ipairs(entry[2]) do n = n + #part end
  return n
end
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
    local from = '(' .. lo
    while deleted < budget and bytes_left > 0 do
      local gap = redis.call('XRANGE', stream, from, '(' .. hi, 'COUNT', 1)
      if #gap == 0 then break end
      bytes_left = bytes_left - size_of(gap[1])
      deleted = deleted + redis.call('XDEL', stream, gap[1][1])
      from = '(' .. gap[1][1]
    end
    if deleted >= budget or bytes_left <= 0 then return {deleted, lo} end
  end
  lo = hi
end
if walked then return {deleted, '-'} end
return {deleted, lo}
