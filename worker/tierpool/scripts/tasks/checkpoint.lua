-- KEYS: stream, checkpoint key. ARGV: group, consumer, entry id, state JSON, ttl ms.
-- Saves a running task's checkpoint, only while this consumer owns its entry.
-- Returns 1, 0 when the entry is no longer pending, -1 when another consumer owns it.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
return 1
