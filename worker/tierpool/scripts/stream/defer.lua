-- KEYS: stream, errors hash, deferrals counter. ARGV: group, consumer, entry id, defer idle ms, task_id, error text,
-- parking consumer, max deferrals, counter ttl ms, fallback idle ms.
-- A RetryAfter: like RETRY_LATER, but while the task has deferrals left its delivery count is set back by one
-- (XCLAIM RETRYCOUNT), so that the reclaim that runs it again does not count a failed delivery, and no error is
-- remembered. Past max deferrals it is an ordinary failed attempt with the fallback idle. Only the owner may do
-- this. Returns 1 (deferred), 2 (failed attempt), 0 when no longer pending, -1 when another consumer owns it.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
local n = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[9])
if n <= tonumber(ARGV[8]) then
  local count = math.max(tonumber(p[1][4]) - 1, 0)
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[3], 'IDLE', ARGV[4], 'RETRYCOUNT', count, 'JUSTID')
  return 1
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[3], 'IDLE', ARGV[10], 'JUSTID')
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
return 2
