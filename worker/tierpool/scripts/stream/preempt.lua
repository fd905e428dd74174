-- include: helpers/stream.lua helpers/give_back.lua
-- PREEMPT: a run this worker stopped for a higher-tier task (tierpool.protocol.preemption), given back.
-- KEYS: stream, the task's preemption count. ARGV: group, consumer, parking consumer, idle ms, entry id, count ttl ms.
-- When this consumer still owns the entry it is given back as HAND_BACK gives entries back (helpers/give_back.lua:
-- any worker's next reclaim takes it, the scaler counts it as reclaimable backlog, and its delivery
-- is not counted, since the preempted run did not fail), and the task's count of preemptions goes up by one
-- (kept ttl ms). Returns that count, or -1 (not this consumer's: nothing changes).
if not give_back(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]) then return -1 end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return n
