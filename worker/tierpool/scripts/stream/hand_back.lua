-- include: helpers/stream.lua helpers/give_back.lua
-- HAND_BACK (protocol 7): entries a worker read but never started, given back at once.
-- KEYS: stream. ARGV: group, consumer, parking consumer, idle ms, entry ids...
-- For each entry this consumer still owns: move it to the parking consumer with the given idle time (claimIdle:
-- any worker's next reclaim takes it) and its delivery count set back by one (XCLAIM RETRYCOUNT), since the
-- delivery that read it never ran it (helpers/give_back.lua). No error is remembered. Entries that are
-- acked, or owned by another consumer, are left alone. Returns how many were handed back.
local n = 0
for i = 5, #ARGV do
  if give_back(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[i]) then n = n + 1 end
end
return n
