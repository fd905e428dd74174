-- include: helpers/stream.lua
-- KEYS: dlq. ARGV: max length (0: none), max age ms (0: none), most entries to delete by age in one call.
-- The lease holder's dead-letter retention. Trims the stream to about its max length (XTRIM MAXLEN ~: a dead
-- letter's XADD does so too, but not one written by an older worker or by the due-time mover), and deletes the
-- dead letters older than the max age by their ids, on Redis' clock: when they were dead-lettered. The age step
-- drops whole stream nodes first (MINID ~ with LIMIT: a large backlog of old dead letters goes over several
-- sweeps, none of them long), then, once it was not cut short, the older entries left in the node that holds
-- the cutoff (exact MINID: at most one node, 100 entries with the server's default stream-node-max-entries).
-- Returns the count deleted.
local dlq = KEYS[1]
local maxlen, age, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local deleted = 0
if maxlen > 0 then deleted = redis.call('XTRIM', dlq, 'MAXLEN', '~', maxlen) end
if age > 0 then
  local cutoff = tostring(math.max(now_ms() - age, 0)) .. '-0'
  local nodes = redis.call('XTRIM', dlq, 'MINID', '~', cutoff, 'LIMIT', limit)
  deleted = deleted + nodes
  if nodes <= limit - 100 then deleted = deleted + redis.call('XTRIM', dlq, 'MINID', cutoff) end
end
return deleted
