-- include: helpers/stream.lua helpers/adopted.lua helpers/due.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, due set, errors hash, deferrals counter. ARGV: group, consumer, entry id, task_id, error, mode
-- ('retry' or 'defer'), delay ms, fallback delay ms, max deferrals, counter ttl ms, tier, and the tier again when it
-- adopts a stream ('' or absent: it does not): its entry is completed (helpers/adopted.lua's adopted_entry) in its
-- scheduled member.
-- A retry or RetryAfter longer than claimIdle: only the owner may do this. Acks (and deletes: see delete_acked)
-- the entry and schedules the task in the due set, in one step, carrying in its envelope the deliveries counted
-- so far (``attempts``), so maxDeliveries and the dead-letter rules hold across the move. A 'defer' within the
-- task's deferrals counts no delivery; past them it is a failed attempt with the fallback delay. Returns 1
-- (scheduled), 2 (deferral past its budget: a failed attempt), 0 (no longer pending), -1 (another consumer owns
-- it).
local owned, status = owned_entry(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if not owned then return status end
if (ARGV[12] or '') ~= '' then owned[2] = adopted_entry(KEYS[1], ARGV[3], owned[2], ARGV[12]) end
local attempts, delay = owned[1], tonumber(ARGV[7])
if ARGV[6] == 'defer' then
  local n = redis.call('INCR', KEYS[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[10])
  if n <= tonumber(ARGV[9]) then
    attempts = attempts - 1
  else
    delay, status = tonumber(ARGV[8]), 2
    redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  end
else
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
end
local due = now_ms() + delay
redis.call('ZADD', KEYS[2], due, scheduled_member(ARGV[11], owned[2], math.max(attempts, 0), due, nil,
                                                 ARGV[4], ARGV[3]))
where_key = KEYS[#KEYS]
put_where(owned[2], in_set(KEYS[2], due))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
delete_acked(KEYS[1], last_delivered(KEYS[1], ARGV[1]), {ARGV[3]})
return status
