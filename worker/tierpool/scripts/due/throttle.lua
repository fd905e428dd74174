-- include: helpers/stream.lua helpers/adopted.lua helpers/due.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, throttled set, bucket hash, the tier's admitted hash, the task's reservation key. ARGV: group,
-- consumer, entry id, tier, ms per task, burst (tasks), ms per token (0: no token bucket), token burst, cost
-- (tokens), tenant ('' none), task_id, the paid time the entry claims ('' none), how late (ms) a paid task may
-- start on its reservation, and the tier when it adopts a stream ('' or absent: it does not; its entry is completed,
-- helpers/adopted.lua's adopted_entry, in its throttled member).
-- GCRA with reservations, on Redis' clock. Only the consumer that owns the pending entry draws. The task may
-- start at s = the earliest time both buckets allow it; both buckets are charged as of s. s now: returns 0 and
-- the worker runs it. s later: the entry is acked (and deleted: see delete_acked) and the task waits in the
-- throttled set until s, marked paid (``paid``: it runs then without drawing again), its reservation recorded in
-- its reservation key (which only this script writes), and the delivery it got here is not counted. A task that
-- claims a paid time runs without drawing only when its reservation key holds that time (taken, so once);
-- otherwise (a ``paid`` field written by a plain XADD or into the due set, a reservation expired or used) it
-- draws like a new task. Returns 0 (run now), the wait in ms (throttled), or -1 (another consumer owns the
-- entry), -2 (no longer pending); nothing is charged then. A throttled task of a gated tenant keeps its slot
-- (protocol 7): its admitted record moves from the entry id to the pseudo entry ``t:<paid>:<task_id>``, count
-- unchanged, and MOVE_DUE binds it back.
-- only the owner draws (a call retried after a lost reply finds its entry acked and throttled already)
local owned, status = owned_entry(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if not owned then return (status == -1) and -1 or -2 end
local claimed, late = ARGV[12] or '', tonumber(ARGV[13] or '') or 0
if claimed ~= '' and redis.call('GET', KEYS[5]) == claimed then
  redis.call('DEL', KEYS[5])
  return 0
end
local now = now_ms()
local per, burst = tonumber(ARGV[5]), tonumber(ARGV[6])
local per_token, token_burst, cost = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local tat = tonumber(redis.call('HGET', KEYS[3], 'tat') or '0') or 0
local tat_t = tonumber(redis.call('HGET', KEYS[3], 'tokens_tat') or '0') or 0
local start = math.max(now, tat + per - burst * per)
if per_token > 0 then
  -- a cost above the token burst starts when the bucket is full, and is charged in full
  start = math.max(start, tat_t + (math.min(cost, token_burst) - token_burst) * per_token)
end
start = math.ceil(start)
tat = math.max(tat, start) + per
local horizon = tat
redis.call('HSET', KEYS[3], 'tat', string.format('%.3f', tat))
if per_token > 0 then
  tat_t = math.max(tat_t, start) + cost * per_token
  redis.call('HSET', KEYS[3], 'tokens_tat', string.format('%.3f', tat_t))
  horizon = math.max(horizon, tat_t)
end
redis.call('PEXPIRE', KEYS[3], math.ceil(horizon - now) + 60000)
if start <= now then return 0 end
redis.call('SET', KEYS[5], tostring(start), 'PX', math.ceil(start - now + late) + 60000)
if (ARGV[14] or '') ~= '' then owned[2] = adopted_entry(KEYS[1], ARGV[3], owned[2], ARGV[14]) end
redis.call('ZADD', KEYS[2], start, scheduled_member(ARGV[4], owned[2], math.max(owned[1] - 1, 0), start, start,
                                               ARGV[11], ARGV[3]))
where_key = KEYS[#KEYS]
put_where(owned[2], in_set(KEYS[2], start))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
delete_acked(KEYS[1], last_delivered(KEYS[1], ARGV[1]), {ARGV[3]})
if ARGV[10] ~= '' and redis.call('HGET', KEYS[4], ARGV[3]) == ARGV[10] then
  redis.call('HDEL', KEYS[4], ARGV[3])
  redis.call('HSET', KEYS[4], 't:' .. tostring(start) .. ':' .. ARGV[11], ARGV[10])
end
return start - now
