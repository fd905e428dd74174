-- KEYS: stream, errors hash. ARGV: group, consumer, entry id, idle ms to set, task_id, error text, parking consumer.
-- Keeps the failed entry pending but makes it reclaimable after the retry backoff, without counting a delivery.
-- Only the owner may do this. The entry moves to the parking consumer, so that its former owner, which skips its
-- own entries when it reclaims, can still pick the retry up. Returns 1, or 0 when this consumer does not own it.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
return 1
