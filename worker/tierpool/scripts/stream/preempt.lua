-- PREEMPT: a run this worker stopped for a higher-tier task (tierpool.protocol.preemption), given back.
-- KEYS: stream, the task's preemption count. ARGV: group, consumer, parking consumer, idle ms, entry id, count ttl ms.
-- When this consumer still owns the entry: it moves to the parking consumer with the given idle time (claimIdle:
-- any worker's next reclaim takes it, and the scaler counts it as reclaimable backlog) and its delivery count set
-- back by one (XCLAIM RETRYCOUNT), as HAND_BACK does, since the preempted run did not fail; and the task's count of
-- preemptions goes up by one (kept ttl ms). Returns that count, or -1 (not this consumer's: nothing changes).
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[5], ARGV[5], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return -1 end
local count = math.max(tonumber(p[1][4]) - 1, 0)
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[5], 'IDLE', ARGV[4], 'RETRYCOUNT', count, 'JUSTID')
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return n
